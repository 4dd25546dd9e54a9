"""Type stub of the C extension ``_columns.c`` (the fast path's loops over a batch's records)."""

from collections.abc import Sequence
from typing import Any, Literal, overload

import numpy as np
import numpy.typing as npt

FLOAT: int
INT64: int
BOOL: int
POSITION: int

def fill(
    records: list[Any],
    key: Any,
    kind: int,
    out: npt.NDArray[np.float64] | npt.NDArray[np.int64],
    table: dict[Any, int] | None,
    /,
) -> bool: ...
@overload
def assemble(
    parts: list[bytes | list[bytes] | tuple[bytes]], count: int, joined: Literal[False] = ..., /
) -> list[bytes]: ...
@overload
def assemble(
    parts: list[bytes | list[bytes] | tuple[bytes]], count: int, joined: Literal[True], /
) -> bytes: ...
def column(records: list[Any], key: Any, missing: object, /) -> list[Any]: ...
def descend(
    holders: list[Any], key: Any, empty: Any, missing: object, /
) -> tuple[list[Any], list[int]]: ...
def replace_absent(
    values: Sequence[Any], missing: object, replacement: object, /
) -> tuple[list[Any], list[int]]: ...
def only(values: Sequence[Any], kinds: tuple[type, ...], /) -> bool: ...
def longest(messages: Sequence[Any], /) -> int: ...
def utf8(messages: Sequence[Any], /) -> bool: ...
