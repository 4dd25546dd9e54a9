"""The subject column: canonical bytes of ``privacy.subject`` per raw message."""

from __future__ import annotations

import pytest
from privstream.pipeline.subjects import subject_column


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
