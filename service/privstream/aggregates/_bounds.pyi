"""Type stub of the C extension ``_bounds.c`` (the aggregates' bounds; see its comment)."""

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

_Int64s = npt.NDArray[np.int64]

def intern(
    table: _Int64s, keys: list[bytes], units: Sequence[bytes | None], ids: _Int64s, mix: int, /
) -> int: ...
def admit(
    table: _Int64s,
    used: npt.NDArray[np.int32],
    subjects: _Int64s,
    cells: _Int64s,
    verdicts: npt.NDArray[np.uint8],
    size: int,
    groups: int,
    records: int,
    mix: int,
    /,
) -> int: ...
def rehash(old: _Int64s, new: _Int64s, mix: int, /) -> int: ...
def may_disagree(lines: list[bytes], /) -> list[int]: ...
