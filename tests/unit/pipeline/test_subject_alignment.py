"""Red team: ``result.subjects`` stays aligned with ``result.outputs`` on every path.

The per-subject ledger charges released record ``i`` to ``result.subjects[i]``;
a subject shifted by one row charges one subject's release to another. Mixed
batches (fast path, records the column checks hand to the reference, records
only the reference decodes, dead letters, deep nesting, integers orjson rounds)
must give, per output, the subject an independent oracle reads: the stdlib
decoder, then a string's UTF-8 bytes (surrogates kept) or an integer's digits.
The same holds through the worker's ``sanitize`` with poison records and after
a handler failure that sends the batch record by record.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from aiokafka import ConsumerRecord
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from privstream.config import parse_config
from privstream.kafka.decode import UndecodableRecord
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import process_batch
from privstream.pipeline.noise import Replayable
from privstream.pipeline.plan import RecordPlan
from privstream.pipeline.subjects import subject_column
from privstream.worker import sanitize as sanitize_module
from privstream.worker.sanitize import sanitize

from tests.support.configs import config_dict, consumer_record

SECRET = bytes(range(3, 35))
FIELDS: list[dict[str, Any]] = [
    {"name": "device_id", "kind": "drop"},
    {"name": "pub", "kind": "public"},
    {"name": "x", "kind": "real", "bounds": [-5, 5], "epsilon": 1.0},
    {
        "name": "m",
        "kind": "categorical",
        "domain": ["u", "v"],
        "epsilon": 1.0,
        "memoize_by": "id",
        "memo_identity_trusted": True,
    },
    {"name": "id", "kind": "drop"},
]


@pytest.fixture(scope="module")
def plan() -> RecordPlan:
    return build_plan(parse_config(config_dict(FIELDS, epsilon=20.0, delta=1e-5)))


def oracle(raw: bytes) -> bytes | None:
    """The subject as the stdlib reads it, canonicalised here, not by the code under test."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    value = obj.get("device_id") if isinstance(obj, dict) else None
    if isinstance(value, str) and value:
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value).encode()
    return None


BIG = [2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 1, -(2**63), -(2**63) - 1, 10**30, -(10**300)]
subject_value = st.one_of(
    st.text(max_size=6),  # surrogates included: json.dumps escapes them, orjson refuses them
    st.integers(),
    st.sampled_from(BIG),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([True, False, None, [], {}, ["a"], -0.0, 7.0]),
)
x_value = st.one_of(
    st.floats(-10, 10),
    st.integers(-10, 10),
    st.sampled_from([2**64, 10**30, "3", None]),  # orjson rounds 2**64 and 10**30: the reference
)


@st.composite
def message(draw: st.DrawFn) -> bytes:
    """A record of every shape the pipeline routes differently."""
    obj: dict[str, Any] = {"pub": 0}
    if draw(st.integers(0, 9)):
        obj["device_id"] = draw(subject_value)
    obj["x"] = draw(x_value)
    obj["m"] = draw(st.sampled_from(["u", "v", "u", "v", "w"]))
    if draw(st.integers(0, 9)):
        obj["id"] = draw(st.one_of(st.text(min_size=1, max_size=4), st.integers(0, 99)))
    shape = draw(st.integers(0, 9))
    if shape == 1:
        obj["pub"] = "\ud800"  # only the reference decodes a lone surrogate
    elif shape == 2:
        obj["extra"] = [[[[]]]] * 60 + [0] * 200  # many brackets, long: the reference path
    raw = json.dumps(obj).encode()
    if shape == 3:  # a duplicated subject: both decoders keep the last one
        raw = b'{"device_id": "first", ' + raw[1:]
    elif shape == 4:
        raw = draw(st.sampled_from([b"not json", b"[1]", b'{"device_id": "a", "x": NaN}', b""]))
    elif shape == 5:
        raw = raw.replace(b"}", b', "x": 1e999}')  # a last x beyond the doubles
    return raw


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(message(), max_size=25), subjected=st.booleans())
def test_each_output_carries_its_own_messages_subject(
    plan: RecordPlan, batch: list[bytes], subjected: bool
) -> None:
    keys = [b"k%d" % i if i % 5 else None for i in range(len(batch))]
    provider = Replayable(
        NoiseKeys(SECRET, "raw"),
        np.zeros(len(batch), dtype=np.int64),
        np.arange(len(batch), dtype=np.int64),
        batch,
    )
    result = process_batch(plan, batch, provider, keys, subject="device_id")
    assert result.subjects is not None
    assert len(result.subjects) == len(result.outputs) == len(result.output_index)
    assert result.subjects == [oracle(batch[i]) for i in result.output_index]
    assert result.subjects == subject_column([batch[i] for i in result.output_index], "device_id")


def poisonable(offset: int, value: bytes, *, poison: bool = False) -> ConsumerRecord[Any, Any]:
    kind = UndecodableRecord if poison else ConsumerRecord
    return consumer_record(offset, value, b"k%d" % offset, kind=kind)


MESSAGES = [
    b'{"device_id": "a", "x": 1, "m": "u", "id": 1, "pub": 0}',
    b'{"device_id": 18446744073709551616, "x": 2, "m": "v", "id": 2, "pub": 0}',
    b"not json",
    b'{"device_id": "\\ud800", "x": 3, "m": "u", "id": 3, "pub": 0}',
    b'{"device_id": 5, "x": "wrong", "m": "u", "id": 4, "pub": 0}',
    b'{"device_id": "e", "x": 10000000000000000000000000000000, "m": "u", "id": 5, "pub": 0}',
    b'{"x": 4, "m": "u", "id": 6, "pub": 0}',
    b'{"device_id": "g", "x": 4, "m": "v", "id": 7, "pub": 0}',
    b'{"device_id": -0, "x": 4, "m": "v", "id": 8, "pub": 0}',
    b'{"device_id": "\xff", "x": 4, "m": "v", "id": 9, "pub": 0}',  # not UTF-8: refused
    b'{"device_id": "j", "x": 4, "m": "v", "id": 10, "pub": 0, "deep": '
    + b"[" * 3000
    + b"]" * 3000
    + b"}",  # deeper than either decoder follows: refused
    b'{"device_id": "k", "x": 4, "m": "v", "id": 11, "pub": 0, "deep": '
    + b"[" * 300
    + b"]" * 300
    + b"}",  # the reference path
]


@pytest.mark.parametrize("poisoned", [(), (0,), (2, 5), (7, 11)])
@pytest.mark.parametrize("handler_fails", [False, True])
def test_sanitize_keeps_subjects_aligned_with_poison_and_per_record_fallback(
    plan: RecordPlan,
    monkeypatch: pytest.MonkeyPatch,
    poisoned: tuple[int, ...],
    handler_fails: bool,
) -> None:
    """Poison records are cut out and the rest re-indexed; a batch that breaks a handler
    is sanitized one record at a time: either way, each output keeps its own subject."""
    if handler_fails:
        real = sanitize_module.process_batch

        def breaks_on_batches(*args: Any, **kwargs: Any) -> Any:
            if len(args[1]) > 1:
                raise RuntimeError("a handler bug")
            return real(*args, **kwargs)

        monkeypatch.setattr(sanitize_module, "process_batch", breaks_on_batches)
    records = [poisonable(i, m, poison=i in poisoned) for i, m in enumerate(MESSAGES)]
    result = sanitize(plan, NoiseKeys(SECRET, "raw"), records, "device_id")
    assert result.subjects is not None
    assert len(result.subjects) == len(result.outputs) == len(result.output_index)
    assert result.subjects == [oracle(MESSAGES[i]) for i in result.output_index]
    expected = [i for i in (0, 1, 3, 5, 6, 7, 8, 11) if i not in poisoned]
    assert result.output_index == expected
