"""Red team (session 12): Avro output meets Subset Selection (fixed: SS is an array).

The derived schema types every categorical that is not local hashing or unary encoding as
its domain (an enum), but a ``subset_selection`` field releases an *array* of ``d``
domain values. The config loads, the schema registers, and every record is then
dead-lettered as ``avro_output_unencodable`` (whose detail blames a public string with a
lone surrogate). With i35, ``auto`` resolves string domains of 5 to 48 values at
eps <= 2 to subset selection, so existing Avro-output configs would stop releasing
anything once both branches land.

Deterministic (keyed noise, fixed secret).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from fastavro import parse_schema, schemaless_reader
from privstream.config import parse_config
from privstream.errors import OutputSchemaError
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import process_batch
from privstream.pipeline.avro_encode import AvroEncoder
from privstream.pipeline.avro_schema import output_schema
from privstream.pipeline.noise import Replayable

from tests.support.configs import config_dict

SECRET = bytes(range(40, 72))
DOMAIN = [f"v{i}" for i in range(8)]


@pytest.mark.parametrize("mechanism", ["subset_selection", "auto"])
def test_a_subset_selection_field_is_written_as_avro_or_refused_at_load(mechanism: str) -> None:
    field: dict[str, Any] = {"name": "c", "kind": "categorical", "domain": DOMAIN}
    field |= {"epsilon": 1.0, "mechanism": mechanism}
    config = parse_config(config_dict([field], epsilon=5.0))
    plan = build_plan(config)
    assert plan.fields[0].mechanism == "subset_selection"  # auto too, since i35
    try:
        schema = output_schema(config.fields, plan)
    except OutputSchemaError:
        return  # refused before any record: the fail-closed fix
    encoder = AvroEncoder(7, schema)
    messages = [b'{"c": "v3"}'] * 20
    positions = np.arange(len(messages), dtype=np.int64)
    noise = Replayable(NoiseKeys(SECRET, "raw"), positions * 0, positions, messages)
    result = encoder.encode(process_batch(plan, messages, noise))
    # before the fix: 0 outputs, 20 dead letters "avro_output_unencodable"
    assert [d.reason for d in result.dead_letters] == []
    assert len(result.outputs) == 20
    parsed = parse_schema(schema)
    first = schemaless_reader(io.BytesIO(result.outputs[0][5:]), parsed, parsed)
    assert isinstance(first, dict) and isinstance(first["c"], list)
