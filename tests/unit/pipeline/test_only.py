"""``columns.only``: the exact-type check every fast-path column runs (``set(map(type, ...))``
before): exact types, no subclasses, any mix of the kinds named."""

from __future__ import annotations

from typing import Any

import pytest
from privstream.pipeline.columns import MISSING, only


class Text(str):
    pass


@pytest.mark.parametrize(
    ("values", "kinds", "expected"),
    [
        ([], (int,), True),
        ([1, 2, 3], (int,), True),
        ([1, True], (int,), False),  # bool is an int subclass, never an int here
        ([True, False], (bool,), True),
        ([1.5, 2, 3.0], (float, int), True),
        ([1.5, 2, "3"], (float, int), False),
        ([1.5, None], (float, int), False),
        (["a", Text("b")], (str,), False),
        (["a", 1, False, None], (str, int, bool, type(None)), True),
        ([MISSING, 1], (int,), False),
        ([[1.0], [2.0, 3]], (list,), True),
    ],
)
def test_only_matches_the_set_of_types_it_replaced(
    values: list[Any], kinds: tuple[type, ...], expected: bool
) -> None:
    assert only(values, *kinds) is expected
    assert (set(map(type, values)) <= set(kinds)) is expected
