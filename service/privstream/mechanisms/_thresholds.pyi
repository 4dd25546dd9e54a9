"""Type stub of the C extension ``_thresholds.c`` (the exact samplers' threshold lookup and
local hashing's support count)."""

import numpy as np
import numpy.typing as npt

def count(
    words: npt.NDArray[np.uint64],
    padded: npt.NDArray[np.uint64],
    guide: npt.NDArray[np.uint16],
    steps: int,
    size: int,
    out: npt.NDArray[np.int64],
    /,
) -> None: ...
def support(
    seeds: npt.NDArray[np.uint64],
    buckets: npt.NDArray[np.uint64],
    digests: npt.NDArray[np.uint64],
    g: int,
    out: npt.NDArray[np.int64],
    /,
) -> None: ...
