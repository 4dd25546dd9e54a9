"""Type stub of the C extension ``_slots.c`` (the ledger's hash table; see its comment)."""

import numpy as np
import numpy.typing as npt

_Int64s = npt.NDArray[np.int64]

def find(
    table: _Int64s,
    keys: _Int64s,
    slots: _Int64s,
    firsts: _Int64s,
    size: int,
    insert: bool,
    mix: int,
    /,
) -> int: ...
