"""Type stub of the C extension ``_thresholds.c`` (the exact samplers' threshold lookup)."""

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
