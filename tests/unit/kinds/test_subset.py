"""``categorical`` with ``mechanism: subset_selection``: parse, release, estimate, memo, audit."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from privstream.audit import audit
from privstream.audit.by_kind import audit_width, target_for
from privstream.audit.sampling import PipelineSampler, RecordSpec
from privstream.audit.scenarios import PlanAuditor
from privstream.cli.main import main
from privstream.cli.metadata import sidecar_path, write_sidecar
from privstream.cli.sanitize import sanitize_stream
from privstream.config import parse_config
from privstream.errors import ConfigError
from privstream.estimate.accumulators import Options
from privstream.estimate.by_kind import estimator_of
from privstream.kinds import build_plan
from privstream.mechanisms.subset_selection import SubsetSelection, include_threshold
from privstream.pipeline.handlers import Rejected
from privstream.pipeline.plan import PlannedField
from privstream.testing import SeededSource

from tests.support.configs import config_dict

DOMAIN = ["red", "green", 3, "blue", "cyan", "pink", "grey", 9]
#: canonical order: sorted by JSON text bytes ('"' sorts before digits)
CANONICAL = ["blue", "cyan", "green", "grey", "pink", "red", 3, 9]


def _field(**extra: Any) -> dict[str, Any]:
    return {
        "name": "c",
        "kind": "categorical",
        "mechanism": "subset_selection",
        "domain": DOMAIN,
        "epsilon": 1.0,
        **extra,
    }


def _planned(**extra: Any) -> PlannedField:
    (planned,) = build_plan(parse_config(config_dict([_field(**extra)], epsilon=5.0))).fields
    return planned


def test_the_release_is_an_array_of_d_domain_values_in_canonical_order() -> None:
    planned = _planned()
    handler = planned.handler
    assert handler.mechanism is not None and list(handler.mechanism.domain) == CANONICAL
    d = handler.mechanism.params()["subset_size"]
    assert d == 2  # k = 8 at eps 1
    parsed = [handler.parse(v) for v in DOMAIN * 250]
    column = handler.release(parsed, SeededSource(1))
    position = {(type(v), v): i for i, v in enumerate(CANONICAL)}
    for row in column.values:
        positions = [position[(type(v), v)] for v in row]
        assert len(row) == d and positions == sorted(set(positions))
    assert column.error is not None
    for value, row, error in zip(parsed, column.values, column.error, strict=True):
        held = any((type(v), v) == (type(CANONICAL[value]), CANONICAL[value]) for v in row)
        assert error == (d - 1 if held else d + 1)
    texts = planned.codec.texts(handler, column.values[:2])
    assert [json.loads(t) for t in texts] == column.values[:2]


def test_the_same_words_give_the_same_arrays_whatever_the_listing_order() -> None:
    values = ["red", 3, "blue", "grey"] * 20

    def released(planned: PlannedField) -> list[Any]:
        parsed = [planned.handler.parse(v) for v in values]
        return list(planned.handler.release(parsed, SeededSource(3)).values)

    assert released(_planned()) == released(_planned(domain=list(reversed(DOMAIN))))


def test_values_outside_the_domain_are_refused_or_mapped() -> None:
    handler = _planned().handler
    with pytest.raises(Rejected) as info:
        handler.parse("purple")
    assert info.value.reason == "unknown_category"
    with pytest.raises(Rejected):
        handler.parse("3")  # the string is not the integer
    assert _planned(unknown_as="red").handler.parse("purple") == CANONICAL.index("red")


def test_subset_selection_refuses_delta_and_needs_a_domain() -> None:
    with pytest.raises(ConfigError, match="subset_selection is pure epsilon-DP"):
        parse_config(config_dict([_field(delta=1e-6)], epsilon=5.0, delta=1e-5))
    no_domain = {k: v for k, v in _field().items() if k != "domain"}
    with pytest.raises(ConfigError, match="subset_selection needs a domain"):
        parse_config(config_dict([no_domain], epsilon=5.0))


def test_memo_token_holds_the_value_and_the_scope_ignores_the_listing_order() -> None:
    first = _planned(memo_identity="message_key")
    shuffled = _planned(memo_identity="message_key", domain=list(reversed(DOMAIN)))
    assert first.memo is not None and shuffled.memo is not None
    assert first.memo.scope == shuffled.memo.scope
    assert first.memo.token(b"dev", first.handler.parse("red")) == b"\x03\x00\x00\x00dev" + b'"red"'


def test_explain_reports_the_subset_size_and_the_error_laws(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}\n"
        "privacy: {epsilon: 5}\nfields:\n"
        "  - {name: c, kind: categorical, domain: [a, b, c, d, e, f, g, h], epsilon: 1}\n",
        encoding="utf-8",
    )
    assert main(["explain", "--config", str(path), "--format", "json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["fields"]
    assert entry["mechanism"] == entry["auto"]["chosen"] == "subset_selection"
    e = np.e
    p = 2 * e / (2 * e + 6)  # d = 2 of k = 8
    assert entry["params"]["subset_size"] == 2
    assert entry["params"]["p"] == pytest.approx(p, rel=1e-12)
    assert entry["expected_error"] == pytest.approx(3 - 2 * p, rel=1e-12)
    assert entry["gamma_lower_bound"] == pytest.approx(7 / (7 + e), rel=1e-12)
    assert entry["auto_warning"] is None


ESTIMATE_CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 2}
fields:
  - {name: page, kind: categorical, mechanism: subset_selection, domain: [DOMAIN], epsilon: 1}
"""


def test_estimate_end_to_end_covers_the_truth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    domain = [f"p{i:02d}" for i in range(16)]
    text = ESTIMATE_CONFIG.replace("DOMAIN", ", ".join(domain))
    config = tmp_path / "config.yaml"
    config.write_text(text, encoding="utf-8")
    plan = build_plan(parse_config(yaml.safe_load(text)))
    rng = np.random.default_rng(35)
    weights = np.r_[np.full(3, 0.2), np.full(13, 0.4 / 13)]
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
    assert page["mechanism"] == "subset_selection" and page["records"] == 8000
    assert [row["value"] for row in page["frequencies"]] == sorted(domain)
    # 5 standard errors per value: false failure below 16 * 6e-7 ~ 1e-5 for a random seed
    for row in page["frequencies"]:
        assert abs(row["estimate"] - row["true"]) < 5 * row["stderr"], row
    consistent = [row["consistent"] for row in page["frequencies"]]
    assert sum(consistent) == pytest.approx(1.0) and min(consistent) >= 0.0


def test_the_estimator_skips_anything_but_d_distinct_domain_values() -> None:
    planned = _planned()
    make = estimator_of(planned)
    assert make is not None
    counts = make(planned.handler, "categorical", Options())
    counts.add([["red", 3], ["red"], ["red", "red"], ["red", "purple"], "red", ["red", [1]]])
    counts.add([["blue", "red"], None])
    assert counts.records == 2
    assert counts.counts.tolist() == [1, 0, 0, 0, 0, 2, 1, 0]  # canonical order
    assert sum(counts.skipped.values()) == 6


def test_the_audit_passes_and_comes_close() -> None:
    config = parse_config(config_dict([_field()], epsilon=5.0))
    plan = build_plan(config)
    target = target_for(plan.fields[0])
    assert target.inputs == ("blue", 9)  # the first and last values in canonical order
    assert audit_width(plan.fields[0]) == 3  # d + 1 words
    report = audit(config, plan, samples=10_000, self_check=False)
    (result,) = report.fields
    assert result.passed
    # {blue in S, 9 not in S} has probability ~0.41 vs ~0.15: the bound comes near eps
    assert result.epsilon_lower_bound > 0.6 * result.claimed_epsilon


def test_the_audit_fails_a_threshold_calibrated_for_twice_the_epsilon() -> None:
    """Include the true value as often as eps 2 would allow while claiming eps 1.

    The ratio of the binding event is then e^2; at 10,000 draws per input the audit's
    bound exceeds 1 with overwhelming probability (it fails on a fixed source anyway).
    """
    config = parse_config(config_dict([_field()], epsilon=5.0))
    plan = build_plan(config)
    mech = plan.fields[0].handler.mechanism
    assert isinstance(mech, SubsetSelection)
    mech.threshold = include_threshold(8, 2, 2.0)
    report = audit(config, plan, samples=10_000, self_check=False)
    (result,) = report.fields
    assert not result.passed and result.epsilon_lower_bound > 1.0


def test_a_memoized_field_gives_one_answer_per_device_and_passes_the_audit() -> None:
    fields = [
        {"name": "device_id", "kind": "drop"},
        _field(memoize_by="device_id", memo_identity_trusted=True),
    ]
    config = parse_config(config_dict(fields, epsilon=5.0))
    plan = build_plan(config)
    auditor = PlanAuditor(plan)
    target = auditor.by_name["c"]
    sampler = PipelineSampler(auditor.field_plan("c"))
    same = sampler.sample(RecordSpec({"c": "red", "device_id": "one"}), 500, [target])
    assert len(np.unique(same.columns["c"], axis=0)) == 1  # the same words: the same subset
    varied = sampler.sample(RecordSpec({"c": "red"}, ("device_id",)), 500, [target])
    assert len(np.unique(varied.columns["c"], axis=0)) > 1
    report = audit(config, plan, samples=10_000, self_check=False, record=False)
    (result,) = report.fields
    assert result.passed and any("distinct memo value" in note for note in result.notes)
