"""Red team 13b: adding ``target`` (i35-sw) changed every real field's release id and hash.

``RealField.target`` (default ``mean``) is dumped into ``release_spec`` and
``config_sha256``, and is not in ``MISSING_DEFAULTS``, so every real field of
every deployed config now hashes differently: a new noise key
(``NoiseKeys.field``), hence fresh noise for re-released records (a re-run of
``sanitize``, at-least-once redelivery after the upgrade) and every earlier
output's real fields refused by ``estimate``. The existing pin
tests/unit/pipeline/test_release_id_pinned.py::test_release_id_is_the_documented_digest[real]
fails on main for the same reason. Deterministic.
"""

from __future__ import annotations

import hashlib
import json

from privstream.config import parse_config
from privstream.config.load import config_sha256
from privstream.pipeline.plan import release_spec

CONFIG = {
    "privacy": {"epsilon": 1},
    "fields": [
        {"name": "t", "kind": "real", "mechanism": "laplace", "bounds": [0, 100], "epsilon": 1}
    ],
}


def test_a_real_field_without_target_keeps_its_release_spec() -> None:
    (spec,) = parse_config(CONFIG).fields
    assert "target" not in release_spec(spec), release_spec(spec)


def test_a_config_without_target_keeps_its_hash() -> None:
    config = parse_config(CONFIG)
    payload = config.model_dump(mode="json", include={"privacy", "fields"})
    for key in ("subject", "subject_public", "ledger"):
        del payload["privacy"][key]
    (field,) = payload["fields"]
    for option in ("on_missing", "impute", "presence_public", "presence_epsilon", "spread"):
        del field[option]
    field.pop("target", None)  # the hash before the option existed
    before = hashlib.sha256(
        json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    assert config_sha256(config) == before
