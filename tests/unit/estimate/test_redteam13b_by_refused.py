"""Red team 13b: ``estimate --by`` on a field whose release id changed (refused).

Records sanitized with ``state`` noised (randomized response, eps 2), then
estimated with a config where ``state`` is ``public``: the sidecar's release
ids refuse ``state``, yet ``--by state`` groups the records by their noisy
``state`` and reports ``noised: null``, as though the groups were exact.
A ``--field`` that is refused exits 2; ``--by state`` should too, or at
least carry the noised-split warning. Deterministic (seeded sanitize).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from privstream.cli.main import main

from tests.unit.estimate.test_groups import CONFIG, sanitized  # noqa: F401 -- the fixture

PUBLIC_STATE = {
    **CONFIG,
    "fields": [
        {"name": "event", "kind": "public"},
        {"name": "state", "kind": "public"},
        CONFIG["fields"][2],
    ],
}


def test_by_a_refused_field_is_refused_or_warned(
    sanitized: dict[str, Any],  # noqa: F811 -- the fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "public_state.json"
    config.write_text(json.dumps(PUBLIC_STATE))
    base = ["estimate", "--config", str(config), "--input", str(sanitized["path"])]
    code = main([*base, "--by", "state", "--field", "temp", "--format", "json"])
    captured = capsys.readouterr()
    if code == 2:
        return  # refused: what --field does
    report = json.loads(captured.out)
    by = report["by"]
    # today: code 0, nothing on stderr, source.refused {}, by["noised"] None,
    # groups '"CA"' and '"TX"' of the noisy values
    assert by["noised"] is not None or "--by state" in captured.err, (code, by["noised"])
