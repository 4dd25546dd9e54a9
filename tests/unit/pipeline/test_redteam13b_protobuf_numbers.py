"""Red team 13b: a field's Protobuf number must not depend on which other fields exist.

protobuf_output's docstring: "a field keeps its number whatever is added,
removed or moved around it". ``f9691`` and ``f9857`` hash to the same number
(19417407); collisions go to the name first in sort order, so adding
``f9691`` to a config holding ``f9857`` moves ``f9857`` to 8933997. The
worker's BACKWARD difference check then refuses the new config ("field
'f9857' (number 19417407) is now 'f9691'"): fail-closed, but a config change
the docs promise is safe is refused. Deterministic (SHA-256 of fixed names).
"""

from __future__ import annotations

import pytest
from privstream.errors import OutputSchemaError
from privstream.pipeline.protobuf_output import _numbers, field_number


def test_adding_a_field_never_moves_an_existing_number() -> None:
    """The fix: numbers are a function of the name alone; a colliding name is refused."""
    assert field_number("f9691") == field_number("f9857")
    before = _numbers(["f9857", "other"])
    assert before["f9857"] == field_number("f9857")
    with pytest.raises(OutputSchemaError, match="'f9691' and 'f9857'"):
        _numbers(["f9691", "f9857"])
