"""Ordinal categories through the exponential mechanism (``mechanism: exponential``).

Formulas are written here from the definition, independently of the code:
``P(j | i) = e^(-lambda |i-j|) / Z_i``, randomized response's error on an
ordered domain ``p sum_j |i - j|`` with ``p = 1 / (m + e^eps)``, and
Theorem 5.5's ``m / (m + e^eps)``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from privstream.audit import audit
from privstream.cli.explain import explain_data
from privstream.config import parse_config
from privstream.errors import ConfigError
from privstream.estimate import Options, StreamAggregate
from privstream.kinds import build_plan
from privstream.mechanisms.exponential import OrdinalExponential, estimate_frequencies
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import process_batch
from privstream.pipeline.noise import Replayable
from privstream.pipeline.reference import process_batch_reference
from privstream.testing import SeededSource

from tests.support.configs import config_dict

PROOF_PAGE = Path(__file__).resolve().parents[3] / "docs" / "proofs" / "exponential.md"
BRACKETS = ["0-17", "18-29", "30-44", "45-64", "65+"]
FIELD: dict[str, Any] = {
    "name": "age",
    "kind": "categorical",
    "mechanism": "exponential",
    "domain": BRACKETS,
    "epsilon": 1.0,
}


def ideal_law(lam: float, k: int) -> list[list[float]]:
    rows = []
    for i in range(k):
        weights = [math.exp(-lam * abs(i - j)) for j in range(k)]
        z = sum(weights)
        rows.append([w / z for w in weights])
    return rows


def worst_error(law: list[list[float]]) -> float:
    return max(sum(p * abs(i - j) for j, p in enumerate(row)) for i, row in enumerate(law))


@pytest.mark.parametrize(("k", "eps"), [(2, 1.0), (5, 0.5), (10, 3.0), (40, 8.0), (256, 1.0)])
def test_the_sampled_law_is_epsilon_dp_and_no_noisier_than_the_textbook(k: int, eps: float) -> None:
    mech = OrdinalExponential(domain=list(range(k)), epsilon=eps)
    law = mech.law
    assert np.allclose(law.sum(axis=1), 1.0)
    # every answer: the largest over inputs within e^eps of the smallest (pure DP)
    ratio = law.max(axis=0) / law.min(axis=0)
    assert np.all(ratio <= math.exp(eps) * (1 + 1e-12))
    m = k - 1
    assert eps / (2 * m) <= mech.lam <= eps / m  # at least the textbook's concentration
    assert np.allclose(law, ideal_law(mech.lam, k), rtol=1e-9, atol=1e-18)
    assert mech.delta == 0.0


def test_the_calibration_reaches_epsilon() -> None:
    """The loss of the ideal law at the calibrated lambda is epsilon (up to the margin)."""
    mech = OrdinalExponential(domain=list(range(10)), epsilon=2.0)
    law = np.array(ideal_law(mech.lam, 10))
    loss = float(np.max(np.log(law.max(axis=0) / law.min(axis=0))))
    assert loss == pytest.approx(2.0, rel=1e-6)


def test_error_and_gamma_from_the_definitions() -> None:
    mech = OrdinalExponential(domain=BRACKETS, epsilon=1.0)
    assert mech.expected_error == pytest.approx(worst_error(ideal_law(mech.lam, 5)), rel=1e-9)
    assert mech.gamma_lower_bound == pytest.approx(4 / (4 + math.e))
    assert mech.gamma_lower_bound <= mech.expected_error


def _doc_table() -> list[tuple[int, float, float, float]]:
    """The comparison table of the proof page (docs/proofs/exponential.md)."""
    doc = PROOF_PAGE.read_text(encoding="utf-8")
    cell = r"\s*\|\s*([\d.]+)"
    rows = re.findall(r"^\|\s*(\d+)" + cell * 3 + r"\s*\|\s*$", doc, flags=re.MULTILINE)
    return [(int(k), float(e), float(rr), float(em)) for k, e, rr, em in rows]


def test_the_documented_comparison_with_randomized_response() -> None:
    table = _doc_table()
    assert len(table) >= 5
    for k, eps, rr_doc, em_doc in table:
        m = k - 1
        rr_error = m * (m + 1) / 2 / (m + math.exp(eps))
        em_error = OrdinalExponential(domain=list(range(k)), epsilon=eps).expected_error
        assert round(rr_error, 2) == rr_doc, (k, eps)
        assert round(em_error, 2) == em_doc, (k, eps)


def test_boundary_words_pick_the_ends() -> None:
    """Word 0 is below every threshold (answer 0), word 2^64 - 1 above all (answer m)."""

    class Fixed:
        def __init__(self, word: int) -> None:
            self.word = word

        def words(self, n: int, k: int) -> Any:
            return np.full((n, k), self.word, dtype=np.uint64)

        def more_words(self, rows: Any, start: int, k: int) -> Any:
            return self.words(len(rows), k)

    mech = OrdinalExponential(domain=BRACKETS, epsilon=1.0)
    inputs = np.arange(5, dtype=np.int64)
    assert mech.release(inputs, Fixed(0)).tolist() == [0] * 5
    assert mech.release(inputs, Fixed(2**64 - 1)).tolist() == [4] * 5


def test_sampled_frequencies_match_the_law() -> None:
    """200,000 draws per input; each output count within 5 sd of its expectation.

    False-failure probability: 25 counts, each beyond 5 sd with < 6e-7: < 2e-5.
    """
    mech = OrdinalExponential(domain=BRACKETS, epsilon=1.0)
    n = 200_000
    for i in range(5):
        out = mech.release(np.full(n, i, dtype=np.int64), SeededSource(100 + i))
        counts = np.bincount(out, minlength=5)
        expected = n * mech.law[i]
        sd = np.sqrt(n * mech.law[i] * (1 - mech.law[i]))
        assert np.all(np.abs(counts - expected) <= 5 * sd), (i, counts, expected)


def test_the_estimator_recovers_the_shares() -> None:
    """Unbiased inversion: each estimate within 5 of its standard errors (false failure < 4e-6)."""
    mech = OrdinalExponential(domain=BRACKETS, epsilon=1.0)
    shares = np.array([0.1, 0.4, 0.3, 0.15, 0.05])
    rng = np.random.default_rng(7)
    truth = rng.choice(5, size=100_000, p=shares)
    released = mech.release(truth.astype(np.int64), SeededSource(8))
    estimates, stderr = estimate_frequencies(mech, np.bincount(released, minlength=5))
    actual = np.bincount(truth, minlength=5) / len(truth)
    assert estimates.sum() == pytest.approx(1.0)
    assert np.all(np.abs(estimates - actual) <= 5 * stderr)


def test_the_standard_error_is_the_spread_of_the_estimates() -> None:
    """300 batches of 20,000 records of fixed data: the estimates' sd is the stated stderr.

    The sample sd of 300 draws is within 4.1% (one sd) of the true one, so a ratio outside
    [0.8, 1.2] is about 5 sd away: false failure < 5 * 6e-7.
    """
    mech = OrdinalExponential(domain=BRACKETS, epsilon=1.0)
    data = np.repeat(np.arange(5, dtype=np.int64), [2000, 8000, 6000, 3000, 1000])
    source = SeededSource(11)
    runs = []
    for _ in range(300):
        released = mech.release(data, source)
        runs.append(estimate_frequencies(mech, np.bincount(released, minlength=5)))
    estimates = np.array([e for e, _ in runs])
    stated = np.mean([s for _, s in runs], axis=0)
    assert np.all(np.abs(estimates.mean(axis=0) - [0.1, 0.4, 0.3, 0.15, 0.05]) < 5 * stated / 17)
    ratio = estimates.std(axis=0, ddof=1) / stated
    assert np.all((ratio > 0.8) & (ratio < 1.2)), ratio


def test_config_and_plan() -> None:
    plan = build_plan(parse_config(config_dict([FIELD])))
    (planned,) = plan.fields
    assert planned.mechanism == "exponential"
    assert isinstance(planned.handler.mechanism, OrdinalExponential)
    # the declared order, never sorted
    assert planned.handler.mechanism.domain == tuple(BRACKETS)
    with pytest.raises(ConfigError, match="pure epsilon-DP"):
        parse_config(config_dict([{**FIELD, "delta": 1e-6}], delta=1e-5))
    with pytest.raises(ConfigError, match="exponential needs a domain"):
        parse_config(config_dict([{k: v for k, v in FIELD.items() if k != "domain"}]))
    too_many = {**FIELD, "domain": [str(v) for v in range(300)]}
    with pytest.raises(ConfigError, match="at most 256"):
        build_plan(parse_config(config_dict([too_many])))


def test_fast_path_equals_reference_and_replays_with_keyed_noise() -> None:
    plan = build_plan(parse_config(config_dict([FIELD, {"name": "id", "kind": "public"}])))
    messages = [json.dumps({"age": BRACKETS[i % 5], "id": i}).encode() for i in range(500)] + [
        b'{"age": "unknown", "id": 1}',
        b'{"id": 2}',
    ]
    keys = NoiseKeys(bytes(range(32)), "raw")
    offsets = np.arange(len(messages), dtype=np.int64)
    partitions = np.zeros(len(messages), dtype=np.int64)

    def noise() -> Replayable:
        return Replayable(keys, partitions, offsets, messages)

    fast = process_batch(plan, messages, noise())
    again = process_batch(plan, messages, noise())
    reference = process_batch_reference(plan, messages, noise())
    assert fast.outputs == again.outputs == reference.outputs
    assert [d.reason for d in fast.dead_letters] == ["unknown_category", "missing_field"]
    released = [json.loads(out)["age"] for out in fast.outputs]
    assert set(released) <= set(BRACKETS)
    assert sum(r == BRACKETS[i % 5] for i, r in enumerate(released)) > 100  # not all noise


def test_explain_and_estimate_report_the_field() -> None:
    config = parse_config(config_dict([FIELD]))
    plan = build_plan(config)
    (entry,) = explain_data(config, plan)["fields"]
    assert entry["mechanism"] == "exponential"
    assert entry["expected_error"] == pytest.approx(plan.fields[0].handler.mechanism.expected_error)  # type: ignore[union-attr]
    messages = [json.dumps({"age": BRACKETS[i % 5]}).encode() for i in range(5000)]
    result = process_batch(plan, messages, SeededSource(3))
    stream = StreamAggregate(plan, Options())
    stream.consume(result.outputs)
    (acc,) = stream.fields
    report = acc.report(Options(), None)
    assert [row["value"] for row in report["frequencies"]] == BRACKETS
    for row in report["frequencies"]:  # 0.2 each; 5 sd: false failure < 3e-6
        assert abs(row["estimate"] - 0.2) <= 5 * row["stderr"]


def test_the_audit_passes_and_comes_close() -> None:
    config = parse_config(config_dict([FIELD]))
    report = audit(config, build_plan(config), samples=10_000, self_check=False)
    (result,) = report.fields
    assert result.passed
    # pure DP on singletons at the ends: about 0.8-0.95 eps at 10,000 draws (as randomized
    # response in test_audit); 0.5 eps would take a deviation of many standard deviations
    assert result.epsilon_lower_bound > 0.5 * result.claimed_epsilon
