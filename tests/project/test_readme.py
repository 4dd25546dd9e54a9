"""The configuration page's full example (docs/configuration.md) is a config privstream accepts."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from privstream.config import parse_config
from privstream.kinds import build_plan

CONFIG_PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_readme_config_reference_is_valid() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", CONFIG_PAGE.read_text(encoding="utf-8"), re.S)
    reference = [b for b in blocks if b.startswith("kafka:")]
    assert len(reference) == 1
    config = parse_config(yaml.safe_load(reference[0]))
    plan = build_plan(config)  # every mechanism accepts its parameters
    kinds = {spec.kind for spec in config.fields}
    assert kinds == {
        "drop",
        "public",
        "real",
        "categorical",
        "boolean",
        "integer",
        "set",
        "vector",
        "functional",
        "timestamp",
    }
    assert plan.epsilon <= config.privacy.epsilon * (1 + 1e-9)
