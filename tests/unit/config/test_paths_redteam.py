"""Red team (session 12): two names that spell one path passed the allow-list checks (now
``path_problems`` compares parsed paths).

``split_path`` reads ``\\[`` and a bare ``[`` as the same character, so ``tag[`` and
``tag\\[`` are two strings spelling the one key ``tag[``. The duplicate-name check
compares strings and ``path_problems`` looks only for paths strictly above another, so
the config loaded with two fields at one key. Measured before the fix:

* ``{name: "tag[", kind: drop}`` beside ``{name: "tag\\[", kind: public}``: the record
  ``{"tag[": "secret", "note": 3}`` is released as ``{"note": ..., "tag[": "secret"}``,
  the value the config also says to drop;
* a noised ``tag[`` beside a public ``tag\\[``: the fast path writes
  ``{"tag[": -5.82, "tag[": 7}`` (the key twice), the reference ``{"tag[": 7}``: the two
  paths disagree, and readers keeping the first or the last key see different values.

Deterministic: config load only.
"""

from __future__ import annotations

from typing import Any

import pytest
from privstream.config import parse_config
from privstream.errors import ConfigError

from tests.support.configs import config_dict

NOISED = {"kind": "real", "bounds": [0, 10], "epsilon": 1.0}


@pytest.mark.parametrize(
    "fields",
    [
        [{"name": "tag[", "kind": "drop"}, {"name": "tag\\[", "kind": "public"}],
        [{"name": "tag[", **NOISED}, {"name": "tag\\[", "kind": "public"}],
        [{"name": "a.tag[", **NOISED}, {"path": ["a", "tag["], **NOISED}],
    ],
)
def test_two_names_spelling_one_path_are_refused(fields: list[dict[str, Any]]) -> None:
    with pytest.raises(ConfigError):
        parse_config(config_dict(fields))
