"""``_columns.column`` and ``_columns.descend``: the fast path's reads of nested fields.

Each gives what its Python model gives (``record.get(key, missing)``; the object under
the key, an empty one where the path breaks), refuses a holder that is not a dict, and
raises instead of reading a freed list when a key's hash empties the records. The field
decoder's structs (``privstream.pipeline.decode``) read through their member descriptors
give what the same messages' dicts give; a record of another type than the member's, or
a member that is no object slot, is refused.
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest
from privstream.pipeline import _columns
from privstream.pipeline.columns import MISSING as ABSENT
from privstream.pipeline.decode import _field_decoder, empty_below, reader

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
    children, wrong = _columns.descend(holders, "k", empty, MISSING)
    assert (children, wrong) == descend_model(holders, "k")
    # every break on the path is the caller's one empty object, never a copy
    breaks = [at for at, h in enumerate(holders) if type(h.get("k")) is not dict]
    assert breaks and all(children[at] is empty for at in breaks)


def test_an_empty_batch() -> None:
    assert _columns.column([], "k", MISSING) == []
    assert _columns.descend([], "k", {}, MISSING) == ([], [])


@pytest.mark.parametrize("call", ["column", "descend"])
def test_a_holder_that_is_no_dict_is_refused(call: str) -> None:
    holders: list[Any] = [{"k": 1}, [("k", 1)]]
    with pytest.raises(TypeError, match="1 is not a dict"):
        if call == "column":
            _columns.column(holders, "k", MISSING)
        else:
            _columns.descend(holders, "k", {}, MISSING)


@pytest.mark.parametrize("call", ["column", "descend"])
def test_a_keys_hash_that_empties_the_records_raises(call: str) -> None:
    records: list[Any] = []
    key = ClearsOnHash(records)
    records.extend({key: {"x": 1}} for _ in range(8))
    key.armed = True
    with pytest.raises(RuntimeError, match="changed size during the call"):
        if call == "column":
            _columns.column(records, key, MISSING)
        else:
            _columns.descend(records, key, {}, MISSING)
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


#: what the struct tests' messages hold under "k" (the decoder refuses any other value on a
#: path: those batches go to orjson)
OBJECTS: list[Any] = [None, {}, {"k": 1}, {"k": {"k": None}}, {"k": 2.5, "x": [1]}, {"x": 0}]


def _messages(rng: random.Random, count: int) -> list[bytes]:
    made = []
    for _ in range(count):
        record: dict[str, Any] = {"k": rng.choice(OBJECTS)} if rng.random() < 0.8 else {}
        if rng.random() < 0.7:
            record["v"] = rng.choice([1, -7, 2.5, 1e300, 2**70, True, "s", None])
        made.append(json.dumps(record).encode())
    return made


@pytest.mark.parametrize("seed", range(10))
def test_structs_read_as_their_dicts(seed: int) -> None:
    """column, descend and fill over the decoder's structs give what they give over the same
    messages' dicts (absent fields: ``MISSING``, the pipeline's own marker)."""
    messages = _messages(random.Random(seed), 60)
    structs = list(map(_field_decoder(("v", ("k", "k"))).decode, messages))
    dicts = [json.loads(m) for m in messages]
    assert _columns.column(structs, reader(structs, "v"), ABSENT) == _columns.column(
        dicts, "v", ABSENT
    )
    empty = empty_below(structs, "k")
    children, wrong = _columns.descend(structs, reader(structs, "k"), empty, ABSENT)
    model, model_wrong = descend_model(dicts, "k")
    assert wrong == model_wrong == []
    assert [c is empty for c in children] == [type(d.get("k")) is not dict for d in dicts]
    assert _columns.column(children, reader(children, "k"), ABSENT) == [
        m.get("k", ABSENT) for m in model
    ]
    for kind in (_columns.FLOAT, _columns.INT64, _columns.BOOL):
        dtype = np.float64 if kind == _columns.FLOAT else np.int64
        out, expected = np.zeros(len(dicts), dtype), np.zeros(len(dicts), dtype)
        mine = _columns.fill(structs, reader(structs, "v"), kind, out, None)
        assert mine == _columns.fill(dicts, "v", kind, expected, None)
        assert not mine or out.tolist() == expected.tolist()


def test_an_all_float_struct_column_fills_as_its_dicts() -> None:
    messages = [json.dumps({"v": v}).encode() for v in (1.5, -2, 0.0, 2**60)]
    structs = list(map(_field_decoder(("v",)).decode, messages))
    out = np.zeros(4)
    assert _columns.fill(structs, reader(structs, "v"), _columns.FLOAT, out, None)
    assert out.tolist() == [1.5, -2.0, 0.0, float(2**60)]


class Slotted:
    __slots__ = ("a",)


class SlottedChild(Slotted):
    __slots__ = ()


def test_a_member_reads_its_own_type_only() -> None:
    """A member descriptor reads records of exactly its type (an unset slot: absent); a
    subclass, a dict or a member that is no object slot (``slice.start``) is refused."""
    member = vars(Slotted)["a"]
    unset, held = Slotted(), Slotted()
    held.a = 5
    assert _columns.column([unset, held], member, MISSING) == [MISSING, 5]
    for records in ([held, SlottedChild()], [held, {"a": 1}]):
        with pytest.raises(TypeError, match="record 1 is not a Slotted"):
            _columns.column(records, member, MISSING)
        with pytest.raises(TypeError, match="record 1 is not a Slotted"):
            _columns.descend(records, member, {}, MISSING)
        with pytest.raises(TypeError, match="record 1 is not a Slotted"):
            _columns.fill(records, member, _columns.INT64, np.zeros(2, np.int64), None)
    with pytest.raises(TypeError, match="not an object slot"):
        _columns.column([slice(1)], vars(slice)["start"], MISSING)
