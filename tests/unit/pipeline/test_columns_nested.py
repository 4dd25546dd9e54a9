"""``_columns.column`` and ``_columns.descend``: the fast path's reads of nested fields.

Each gives what its Python model gives (``record.get(key, missing)``; the object under
the key, an empty one where the path breaks), refuses a holder that is not a dict, and
raises instead of reading a freed list when a key's hash empties the records.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from privstream.pipeline import _columns

from tests.unit.pipeline.test_columns_hostile import ClearsOnHash

MISSING = object()


def descend_model(holders: list[dict[str, Any]], key: str) -> tuple[list[Any], list[int]]:
    children: list[Any] = []
    wrong: list[int] = []
    for at, holder in enumerate(holders):
        child = holder.get(key)
        if type(child) is not dict:
            if child is not None:
                wrong.append(at)
            child = {}
        children.append(child)
    return children, wrong


VALUES: list[Any] = [None, 0, 1.5, "s", True, [], [{}], {}, {"k": 1}, {"k": {"k": None}}]


def random_holders(rng: random.Random, count: int) -> list[dict[str, Any]]:
    holders: list[dict[str, Any]] = []
    for _ in range(count):
        holder = {"k": rng.choice(VALUES)} if rng.random() < 0.8 else {"other": 1}
        holders.append(holder)
    return holders


@pytest.mark.parametrize("seed", range(20))
def test_column_and_descend_match_their_models(seed: int) -> None:
    holders = random_holders(random.Random(seed), 50)
    assert _columns.column(holders, "k", MISSING) == [h.get("k", MISSING) for h in holders]
    empty: dict[str, Any] = {}
    children, wrong = _columns.descend(holders, "k", empty)
    assert (children, wrong) == descend_model(holders, "k")
    # every break on the path is the caller's one empty object, never a copy
    breaks = [at for at, h in enumerate(holders) if type(h.get("k")) is not dict]
    assert breaks and all(children[at] is empty for at in breaks)


def test_an_empty_batch() -> None:
    assert _columns.column([], "k", MISSING) == []
    assert _columns.descend([], "k", {}) == ([], [])


@pytest.mark.parametrize("call", ["column", "descend"])
def test_a_holder_that_is_no_dict_is_refused(call: str) -> None:
    holders: list[Any] = [{"k": 1}, [("k", 1)]]
    with pytest.raises(TypeError, match="1 is not a dict"):
        if call == "column":
            _columns.column(holders, "k", MISSING)
        else:
            _columns.descend(holders, "k", {})


@pytest.mark.parametrize("call", ["column", "descend"])
def test_a_keys_hash_that_empties_the_records_raises(call: str) -> None:
    records: list[Any] = []
    key = ClearsOnHash(records)
    records.extend({key: {"x": 1}} for _ in range(8))
    key.armed = True
    with pytest.raises(RuntimeError, match="changed size during the call"):
        if call == "column":
            _columns.column(records, key, MISSING)  # type: ignore[arg-type]
        else:
            _columns.descend(records, key, {})  # type: ignore[arg-type]
    assert records == []


@pytest.mark.parametrize("seed", range(10))
def test_replace_absent_matches_its_model(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.choice([None, MISSING, 0, False, "", [], 2.5]) for _ in range(40)]
    stand_in = object()
    for given in (values, tuple(values)):
        replaced, positions = _columns.replace_absent(given, MISSING, stand_in)
        assert positions == [at for at, v in enumerate(values) if v is None or v is MISSING]
        assert replaced == [stand_in if at in positions else v for at, v in enumerate(values)]
        assert all(replaced[at] is stand_in for at in positions)
    assert _columns.replace_absent([], MISSING, stand_in) == ([], [])
    with pytest.raises(TypeError, match="must be a sequence"):
        _columns.replace_absent(7, MISSING, stand_in)  # type: ignore[arg-type]
