"""``categorical`` with ``mechanism: unary_encoding``: parse, release, estimate, memo, audit."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from privstream.audit import audit
from privstream.audit.by_kind import target_for
from privstream.cli.main import main
from privstream.cli.metadata import sidecar_path, write_sidecar
from privstream.cli.sanitize import sanitize_stream
from privstream.config import parse_config
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.pipeline.handlers import Rejected
from privstream.pipeline.plan import PlannedField
from privstream.testing import SeededSource

from tests.support.configs import config_dict

DOMAIN = ["red", "green", 3, "blue"]
#: canonical order: sorted by JSON text bytes ('"' sorts before '3')
CANONICAL = ["blue", "green", "red", 3]


def _field(**extra: Any) -> dict[str, Any]:
    return {
        "name": "c",
        "kind": "categorical",
        "mechanism": "unary_encoding",
        "domain": DOMAIN,
        "epsilon": 1.0,
        **extra,
    }


def _planned(**extra: Any) -> PlannedField:
    (planned,) = build_plan(parse_config(config_dict([_field(**extra)], epsilon=5.0))).fields
    return planned


def test_the_release_is_an_array_of_domain_values_in_canonical_order() -> None:
    planned = _planned()
    handler = planned.handler
    assert handler.mechanism is not None
    assert list(handler.mechanism.domain) == CANONICAL
    parsed = [handler.parse(v) for v in ["red", 3, "blue", "green"] * 500]
    column = handler.release(parsed, SeededSource(1))
    position = {(type(v), v): i for i, v in enumerate(CANONICAL)}
    for row in column.values:
        positions = [position[(type(v), v)] for v in row]
        assert positions == sorted(set(positions))  # distinct values, canonical order
    # at least one array is empty and one holds several values (probability ~1 at n = 2000)
    assert min(map(len, column.values)) == 0 and max(map(len, column.values)) >= 2
    # the error column is the Hamming distance from the input's one-hot vector
    assert column.error is not None
    for value, row, error in zip(parsed, column.values, column.error, strict=True):
        true = CANONICAL[value]
        hits = [v for v in row if (type(v), v) == (type(true), true)]
        assert error == len(row) - len(hits) + (1 - len(hits))


def test_values_outside_the_domain_are_refused_or_mapped() -> None:
    handler = _planned().handler
    with pytest.raises(Rejected) as info:
        handler.parse("purple")
    assert info.value.reason == "unknown_category"
    with pytest.raises(Rejected):
        handler.parse("3")  # the string is not the integer
    mapped = _planned(unknown_as="red").handler
    assert mapped.parse("purple") == CANONICAL.index("red")


def test_unary_encoding_refuses_delta_and_needs_a_domain() -> None:
    with pytest.raises(ConfigError, match="unary_encoding is pure epsilon-DP"):
        parse_config(config_dict([_field(delta=1e-6)], epsilon=5.0, delta=1e-5))
    no_domain = {k: v for k, v in _field().items() if k != "domain"}
    with pytest.raises(ConfigError, match="unary_encoding needs a domain"):
        parse_config(config_dict([no_domain], epsilon=5.0))


def test_memo_token_holds_the_value_and_the_scope_ignores_the_listing_order() -> None:
    first = _planned(memo_identity="message_key")
    shuffled = _planned(memo_identity="message_key", domain=list(reversed(DOMAIN)))
    assert first.memo is not None and shuffled.memo is not None
    assert first.memo.scope == shuffled.memo.scope
    position = first.handler.parse("red")
    assert first.memo.token(b"dev", position) == b"\x03\x00\x00\x00dev" + b'"red"'


def test_explain_reports_the_mechanism_and_both_optimality_views(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    domain = "[" + ", ".join(f"w{i}" for i in range(1000)) + "]"
    path.write_text(
        "kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}\n"
        "privacy: {epsilon: 5}\nfields:\n"
        f"  - {{name: u, kind: categorical, mechanism: unary_encoding, domain: {domain},"
        " epsilon: 1}\n",
        encoding="utf-8",
    )
    assert main(["explain", "--config", str(path), "--format", "json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["fields"]
    e = np.e
    # E[error] = 1/2 + 999 / (e + 1), gamma = 999 / (999 + e): the "270x"
    expected = 0.5 + 999 / (e + 1)
    assert entry["expected_error"] == pytest.approx(expected, rel=1e-12)
    assert entry["gamma_lower_bound"] == pytest.approx(999 / (999 + e), rel=1e-12)
    assert entry["optimality"]["error_to_gamma"] == pytest.approx(
        expected * (999 + e) / 999, rel=1e-12
    )
    assert 265 < entry["optimality"]["error_to_gamma"] < 275
    # auto picks local hashing, within 0.25% of OUE here (and never more than 4.1% above it)
    assert entry["auto"]["chosen"] == "local_hashing"
    assert 0.995 < entry["optimality"]["variance_to_auto"] <= 1.0
    assert entry["auto_warning"] is None


ESTIMATE_CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 2}
fields:
  - {name: page, kind: categorical, mechanism: unary_encoding, domain: [DOMAIN], epsilon: 1}
"""


def test_estimate_end_to_end_covers_the_truth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    domain = [f"p{i:02d}" for i in range(30)]
    text = ESTIMATE_CONFIG.replace("DOMAIN", ", ".join(domain))
    config = tmp_path / "config.yaml"
    config.write_text(text, encoding="utf-8")
    plan = build_plan(parse_config(yaml.safe_load(text)))
    rng = np.random.default_rng(16)
    weights = np.r_[np.full(3, 0.2), np.full(27, 0.4 / 27)]
    values = [str(v) for v in rng.choice(domain, size=8000, p=weights)]
    lines = [json.dumps({"page": v}).encode() for v in values]
    out = io.BytesIO()
    sanitize_stream(plan, lines, out, str(tmp_path / "dead.jsonl"), SeededSource(5))
    (tmp_path / "clean.jsonl").write_bytes(out.getvalue())
    write_sidecar(sidecar_path(str(tmp_path / "clean.jsonl")), plan, len(lines))
    raw = tmp_path / "raw.jsonl"
    raw.write_bytes(b"\n".join(lines) + b"\n")
    args = ["estimate", "--config", str(config), "--input", str(tmp_path / "clean.jsonl")]
    code = main([*args, "--truth", str(raw), "--format", "json", "--consistent"])
    assert code == 0
    (page,) = json.loads(capsys.readouterr().out)["fields"]
    assert page["mechanism"] == "unary_encoding" and page["records"] == 8000
    assert [row["value"] for row in page["frequencies"]] == sorted(domain)
    # 5 standard errors per value: false failure below 30 * 6e-7 ~ 2e-5 for a random seed
    for row in page["frequencies"]:
        assert abs(row["estimate"] - row["true"]) < 5 * row["stderr"], row
    consistent = [row["consistent"] for row in page["frequencies"]]
    assert sum(consistent) == pytest.approx(1.0) and min(consistent) >= 0.0


def test_the_audit_passes_and_comes_close() -> None:
    config = parse_config(config_dict([_field()], epsilon=5.0))
    plan = build_plan(config)
    target = target_for(plan.fields[0])
    assert target.inputs == ("blue", "green")  # the first two values in canonical order
    report = audit(config, plan, samples=10_000, self_check=False)
    (result,) = report.fields
    assert result.passed
    # the extremal event (bit pattern of A u B) has probability ~0.2: the bound comes near eps
    assert result.epsilon_lower_bound > 0.5 * result.claimed_epsilon
