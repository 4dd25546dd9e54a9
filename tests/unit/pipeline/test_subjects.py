"""The subject column: canonical bytes of ``privacy.subject`` per raw message."""

from __future__ import annotations

import random

import pytest
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.mechanisms import OsEntropy
from privstream.pipeline import process_batch
from privstream.pipeline.subjects import subject_column, subject_values

from tests.support.configs import config_dict


def test_strings_and_integers_become_the_bytes_a_collector_keys_with() -> None:
    messages = [
        b'{"device_id": "dev-7", "x": 1}',
        b'{"device_id": 7}',
        b'{"device_id": "\\u00e9t\\u00e9"}',
        b'{"device_id": 123456789012345678901234567890}',  # beyond 64 bits: the slow path
    ]
    assert subject_column(messages, "device_id") == [
        b"dev-7",
        b"7",
        "\u00e9t\u00e9".encode(),
        b"123456789012345678901234567890",
    ]


@pytest.mark.parametrize(
    "message",
    [
        b'{"x": 1}',
        b'{"device_id": null}',
        b'{"device_id": ""}',
        b'{"device_id": 1.5}',
        b'{"device_id": true}',
        b'{"device_id": ["a"]}',
        b'["device_id"]',
        b"not json",
        b'{"device_id": NaN}',
    ],
)
def test_anything_else_has_no_subject(message: bytes) -> None:
    # next to a good message, so the all-strings fast path cannot take the batch
    assert subject_column([b'{"device_id": "a"}', message], "device_id") == [b"a", None]


def test_a_lone_surrogate_survives_the_stdlib_path() -> None:
    # orjson refuses it, the pipeline's reference decoder accepts it
    assert subject_column([b'{"device_id": "\\ud800"}'], "device_id") == [b"\xed\xa0\x80"]


def test_the_all_strings_fast_path_gives_what_the_general_path_gives() -> None:
    batch = [b'{"device_id": "d%d"}' % i for i in range(50)]
    mixed = [*batch, b'{"device_id": 50}']
    assert subject_column(batch, "device_id") == subject_column(mixed, "device_id")[:50]
    assert subject_column([], "device_id") == []


def test_process_batch_reads_the_same_subjects_from_its_own_decode() -> None:
    """``process_batch(..., subject=)``: per output, what ``subject_column`` reads of its
    message, on the fast path, the reference path and a mix of both."""
    config = parse_config(
        config_dict(
            [{"name": "device_id", "kind": "drop"}, {"name": "x", "kind": "public"}], epsilon=1.0
        )
    )
    plan = build_plan(config)
    messages = [
        b'{"device_id": "dev-7", "x": 1}',
        b'{"device_id": 7, "x": 2}',
        b'{"device_id": 123456789012345678901234567890, "x": 3}',  # orjson rounds: reference
        b'{"device_id": 1.5, "x": 4}',
        b'{"x": 5}',
        b'{"device_id": "", "x": 6}',
        b'{"device_id": "\\ud800", "x": 7}',  # a lone surrogate: only the reference decodes it
        b"not json",
        b'{"device_id": "dev-8", "x": NaN}',  # refused by both decoders: a dead letter
    ]
    strings = [b'{"device_id": "d%d", "x": 1}' % i for i in range(20)]
    for batch in (messages, strings, strings + messages):
        result = process_batch(plan, batch, OsEntropy(), subject="device_id")
        expected = subject_column([batch[i] for i in result.output_index], "device_id")
        assert result.subjects == expected
        assert len(result.subjects) == len(result.outputs) > 0
    assert process_batch(plan, strings, OsEntropy()).subjects is None


class Name(str):
    """A str subclass (no JSON decoder makes one; a caller's own objects might), whose
    ``encode`` lies: its subject is its characters' bytes on every path."""

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"forged"


BIG = b"123456789012345678901234567890"  # beyond 64 bits: orjson rounds it to a float
#: (a field value as a decoder may hand it over, its raw message, the subject it must give)
VALUES: list[tuple[object, bytes, bytes | None]] = [
    ("dev-7", b'{"device_id": "dev-7"}', b"dev-7"),
    ("\u00e9t\u00e9", '{"device_id": "\u00e9t\u00e9"}'.encode(), "\u00e9t\u00e9".encode()),
    ("\ud800", b'{"device_id": "\\ud800"}', b"\xed\xa0\x80"),  # the reference decoder's
    ("", b'{"device_id": ""}', None),
    (None, b'{"device_id": null}', None),
    (7, b'{"device_id": 7}', b"7"),
    (-0, b'{"device_id": -0}', b"0"),
    (True, b'{"device_id": true}', None),
    (1.5, b'{"device_id": 1.5}', None),
    (1.2345678901234568e29, b'{"device_id": 123456789012345678901234567890}', BIG),
    (["a"], b'{"device_id": ["a"]}', None),
    ({"a": 1}, b'{"device_id": {"a": 1}}', None),
    (b"raw", b'{"device_id": "raw"}', None),  # bytes are no JSON value
    (Name("dev-8"), b'{"device_id": "dev-8"}', b"dev-8"),  # a string, whatever its class
]


@pytest.mark.parametrize("seed", range(40))
def test_each_subject_is_its_own_values_whatever_else_the_batch_holds(seed: int) -> None:
    """The one-pass path (every value a non-empty, encodable string) and the general path
    give each value the same subject: a value's subject never depends on its neighbours."""
    rng = random.Random(seed)
    picks = [rng.randrange(len(VALUES)) for _ in range(rng.randrange(1, 8))]
    if seed % 2:  # batches of strings only, some of them not encodable or empty
        picks = [rng.choice([0, 1, 2, 3, 13]) for _ in picks]
    objs = [{"device_id": VALUES[i][0]} for i in picks]
    messages = [VALUES[i][1] for i in picks]
    expected = [VALUES[i][2] for i in picks]
    assert subject_values(objs, messages, "device_id") == expected
    where = list(range(len(picks)))
    assert subject_values(objs, messages, "device_id", where) == expected
