"""Red team: an ``integer`` field releases or dead-letters a JSON number by its value.

``IntegerHandler`` accepts a whole-valued float (``3.0``) and clamps numbers of
any size, but dead-letters a fraction (``wrong_type``). So of two records that
both hold a float-spelled number, ``2.0`` is released and ``2.5`` is not,
``1e-400`` (underflows to 0.0) is released and ``5e-324`` is not: whether a
record appears depends on its value, and protection.md's list of what stays
observable names "a value of the wrong JSON type" only (both are JSON numbers).
Either release a fraction like any other value of the field (round it, as the
bounds clamp it) or say so in protection.md; this test asks for the former.
"""

from __future__ import annotations

import pytest
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.pipeline import process_batch
from privstream.pipeline.reference import process_batch_reference
from privstream.testing import SeededSource

from tests.support.configs import config_dict


@pytest.mark.parametrize("process", [process_batch, process_batch_reference])
def test_float_spelled_integers_are_released_whatever_their_value(process: object) -> None:
    fields = [
        {"name": "seq", "kind": "public"},
        {"name": "n", "kind": "integer", "bounds": [0, 100], "epsilon": 1.0},
    ]
    plan = build_plan(parse_config(config_dict(fields, epsilon=1.0)))
    values = ["2.0", "2.5", "1e-400", "5e-324", "99.999999999999999999", "100.00000000000001"]
    messages = [b'{"seq": %d, "n": %s}' % (i, v.encode()) for i, v in enumerate(values)]
    result = process(plan, messages, SeededSource(1))  # type: ignore[operator]
    dead = {values[d.index]: d.reason for d in result.dead_letters}
    assert dead == {}
