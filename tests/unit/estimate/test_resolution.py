"""The histogram's reliability checks (``privstream.estimate.resolution``).

Seeded throughout: every number is deterministic; the tolerances are stated
beside each assertion.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from privstream.cli.main import main
from privstream.cli.metadata import sidecar_path, write_sidecar
from privstream.cli.sanitize import sanitize_stream
from privstream.config import parse_config
from privstream.estimate.by_kind import laplace_api
from privstream.estimate.resolution import check_bins
from privstream.kinds import build_plan
from privstream.mechanisms.estimation import LatticeHistogram
from privstream.testing import SeededSource

CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 4}
fields:
  - {name: temp, kind: real, mechanism: laplace, bounds: [-20, 60], epsilon: 0.5}
  - {name: clicks, kind: integer, bounds: [0, 4], epsilon: 3}
"""


def test_model_free_stderr_is_the_unbiased_inverse_error() -> None:
    """sqrt(2 beta^3 / n) against the simulated unbiased inverse of discrete Laplace noise.

    Truth: every record in bin 0; noise: a difference of two geometrics
    (discrete Laplace, P(Z = k) ~ a^|k|). The exact inverse of the module
    docstring, averaged over n records, has the standard deviation the
    formula approximates (it drops terms of order 1/beta): within 25% at
    beta = 6. 400 repetitions: the sample sd is within 7% of the true one
    with probability > 0.99.
    """
    beta, n, reps = 6.0, 500, 400
    a = math.exp(-1.0 / beta)
    rng = np.random.default_rng(11)
    noise = rng.geometric(1 - a, (reps, n)) - rng.geometric(1 - a, (reps, n))
    j = noise  # the true value is bin 0
    c = a / (1 - a) ** 2
    term = (j == 0) + c * (2 * (j == 0) - (j == -1) - (j == 1))
    simulated = float(term.mean(axis=1).std(ddof=1))
    assert simulated == pytest.approx(math.sqrt(2 * beta**3 / n), rel=0.25)


def _sanitized(tmp_path: Path, n: int) -> tuple[Path, Path, Path]:
    """A step-like temperature (93% in [-15, 0)) and uniform clicks, sanitized with a seed."""
    rng = np.random.default_rng(5)
    temp = np.where(rng.random(n) < 0.93, rng.uniform(-15, 0, n), rng.uniform(0, 60, n))
    raw = [
        json.dumps({"temp": float(t), "clicks": int(c)}).encode()
        for t, c in zip(temp, rng.integers(0, 5, n), strict=True)
    ]
    plan = build_plan(parse_config(yaml.safe_load(CONFIG)))
    out = io.BytesIO()
    sanitize_stream(plan, raw, out, str(tmp_path / "dead.jsonl"), SeededSource(3))
    config, sanitized, truth = tmp_path / "c.yaml", tmp_path / "s.jsonl", tmp_path / "raw.jsonl"
    config.write_text(CONFIG)
    sanitized.write_bytes(out.getvalue())
    truth.write_bytes(b"\n".join(raw) + b"\n")
    write_sidecar(sidecar_path(str(sanitized)), plan, n)
    return config, sanitized, truth


def test_bins_too_fine_for_n_and_epsilon_are_withheld(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: --bins 4 at epsilon 0.5 (noise scale 160, bins 20 wide), n = 2000."""
    config, sanitized, truth = _sanitized(tmp_path, 2000)
    args = ["estimate", "--config", str(config), "--input", str(sanitized), "--bins", "4"]
    assert main([*args, "--format", "json", "--truth", str(truth)]) == 0
    fields = {f["name"]: f for f in json.loads(capsys.readouterr().out)["fields"]}
    temp = fields["temp"]["histogram"]["bins"]
    # beta = 160 / 20 = 8: sqrt(2 * 8^3 / 2000) = 0.72 > 0.25, every bin withheld
    assert all("model-free stderr 0.72" in b["unreliable"] for b in temp)
    # what would have been printed is far from the truth (the complaint)
    assert abs(temp[0]["estimate"] - temp[0]["true"]) > 0.2
    # the integer field at epsilon 3 (noise scale 4/3 over 5 values) is resolved
    clicks = fields["clicks"]["histogram"]["bins"]
    assert len(clicks) == 4 and all(b["unreliable"] is None for b in clicks)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.count("withheld  -") == 4
    assert "4 of 4 bins withheld: too fine for these records and this epsilon" in out


def test_a_bin_biased_beyond_its_stderr_has_an_interval_that_carries_the_bias(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """More records resolve the bins, but the step in the truth biases the first bin: its
    interval is widened by the bias bound (``resolution``) and covers the truth."""
    config, sanitized, truth = _sanitized(tmp_path, 100_000)
    args = ["estimate", "--config", str(config), "--input", str(sanitized), "--bins", "4"]
    assert main([*args, "--format", "json", "--truth", str(truth), "--field", "temp"]) == 0
    (temp,) = json.loads(capsys.readouterr().out)["fields"]
    first = temp["histogram"]["bins"][0]
    assert first["unreliable"] is None and first["bias"] > first["stderr"]
    # the estimate is several standard errors from the truth, and inside its interval
    assert abs(first["estimate"] - first["true"]) > 3 * first["stderr"]
    assert first["ci"][0] <= first["true"] <= first["ci"][1]


def _spiky_release(histogram: LatticeHistogram, seed: int, n: int) -> tuple[Any, Any]:
    """The issue's shape: 30% of the values at 23, 30% at 77, the rest uniform on [0, 100];
    discrete Laplace noise drawn as a difference of two geometrics (``P(Z = k) ~ a^|k|``)."""
    lattice = histogram.noise
    rng = np.random.default_rng(seed)
    u = rng.random(n)
    values = np.where(u < 0.3, 23.0, np.where(u < 0.6, 77.0, rng.uniform(0, 100, n)))
    indices = lattice.noiseless(values)
    cdf = lattice.cdf(np.array([-1, 0]))
    a = (1 - (cdf[1] - cdf[0])) / (1 + (cdf[1] - cdf[0]))  # P(Z = 0) = (1 - a) / (1 + a)
    noise = rng.geometric(1 - a, n) - rng.geometric(1 - a, n)
    released = lattice.origin + lattice.step * (indices + noise)
    truth = np.bincount(histogram.bin_of(indices), minlength=histogram.bins) / n
    return histogram.observe(released), truth


def test_intervals_cover_a_spiky_truth_and_withholding_is_stable() -> None:
    """Point masses inside the bins (outside the model) at epsilon 4 on [0, 100], n = 20,000,
    5 bins, 20 releases with fixed seeds: the intervals +- 1.96 sqrt(stderr^2 + bias^2)
    cover the true shares in at least 90 of 100 bins (the old +- 1.96 stderr covered about
    20% of them). If each interval covered with probability 0.95 independently, 11 or more
    misses of 100 would have probability 0.011; the intervals are conservative (bias bound
    over four shapes), so the false-failure probability is below that. Withholding reads
    only n, epsilon, the bounds and the bins: the same in every release."""
    config = {"privacy": {"epsilon": 4}, "fields": [{"name": "x", "kind": "real",
              "mechanism": "laplace", "bounds": [0, 100], "epsilon": 4}]}  # fmt: skip
    mechanism = build_plan(parse_config(config)).fields[0].handler.mechanism
    histogram = LatticeHistogram(laplace_api(mechanism).lattice, 5)  # type: ignore[arg-type]
    covered, reasons = [], set()
    for seed in range(20):
        counts, truth = _spiky_release(histogram, seed, 20_000)
        estimate = histogram.estimate(counts, resamples=50)
        checked = check_bins(histogram, estimate)
        reasons.add(tuple(checked.problems))
        width = 1.96 * np.hypot(estimate.stderr, checked.bias)
        covered.extend(np.abs(estimate.estimate - truth) <= width)
    assert reasons == {("",) * 5}
    assert sum(covered) >= 90, sum(covered)
    # at 20 records the same bins are too fine for the noise: withheld in every release
    few = [check_bins(histogram, histogram.estimate(_spiky_release(histogram, s, 20)[0],
           resamples=2)).problems for s in range(3)]  # fmt: skip
    assert all(p == few[0] and all(p) for p in few)
