"""Red team (session 12): JSON Schema input (i33-protobuf) and the keys of a record.

The shape the writer schema is checked against keeps every key of the record, including
the keys of objects the config never reads (a map such as ``purchases``), and the
verdict's detail names the JSON path where it failed:

1. the ``json_schema_invalid`` detail quotes a key of the raw record into the dead-letter
   header (``$.purchases['alice@example.com HIV test']``): a map's keys are data, and
   every other reason's detail names config paths only (``avro_encode._why``: "never put
   a raw value in a dead-letter header");
2. a schema registered under the topic's subject (a producer may register one; producers
   with ``use.latest.version`` then write under it) decides a record's release by the
   text of such keys (``patternProperties``): ``{"purchases": {"HIV test": 1}}`` is
   dead-lettered, ``{"purchases": {"flu test": 1}}`` released, though no field reads
   ``purchases``.

Deterministic.
"""

from __future__ import annotations

import json
from typing import Any

from privstream.pipeline.json_schema import parse_writer_schema, to_json

KEY = "alice@example.com HIV test"


def framed(sid: int, record: dict[str, Any]) -> bytes:
    return b"\x00" + sid.to_bytes(4, "big") + json.dumps(record).encode()


def test_the_invalid_detail_never_quotes_a_key_of_the_record() -> None:
    schema = {
        "type": "object",
        "properties": {"purchases": {"type": "object", "additionalProperties": {"type": "number"}}},
    }
    validator = parse_writer_schema(3, json.dumps(schema))
    (verdict,) = to_json([framed(3, {"x": 1, "purchases": {KEY: "positive"}})], {3: validator})
    assert not isinstance(verdict, bytes)  # dead-lettered: the shape is wrong
    assert verdict.reason == "json_schema_invalid"
    assert "alice" not in verdict.detail  # today: "... at $.purchases['alice@example.com ..."


def test_the_verdict_does_not_depend_on_the_text_of_a_key_no_field_reads() -> None:
    schema = {
        "type": "object",
        "properties": {"purchases": {"type": "object", "patternProperties": {"^HIV": False}}},
    }
    validator = parse_writer_schema(4, json.dumps(schema))
    verdicts = to_json(
        [framed(4, {"x": 1, "purchases": {k: 1}}) for k in ("HIV test", "flu test")],
        {4: validator},
    )
    released = [isinstance(v, bytes) for v in verdicts]
    assert released[0] == released[1], f"released: {released} (HIV test, flu test)"
