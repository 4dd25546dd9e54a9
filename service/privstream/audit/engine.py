r"""Run one audit (a *scenario*) and report its epsilon lower bound.

One audit has a claimed (eps, delta), a list of inputs, the
ordered pairs of them that are neighbours, a way to draw ``n`` outputs of
an input, and a family of test sets. It runs in three steps:

1. **Pilot** (only when the family depends on the outputs' scale: real,
   integer, vector and functional fields): ``max(1000, n/20)`` draws per
   input, used only to place the thresholds (``privstream.audit.events``).
2. **Counting**: ``n`` fresh draws per input; ``K_i(S)`` for every input
   ``i`` and set ``S``.
3. **Bounds**: Clopper-Pearson at ``beta = alpha / (2 |I| |F|)`` and
   ``eps_lb = max over pairs (i, j) and S of ln((L_i(S) - delta) / U_j(S))``
   (``privstream.audit.stats``); the audit fails when ``eps_lb > eps``.

The scenarios of a config (per field and whole record) are built in
``privstream.audit.scenarios``; the self-check's in ``privstream.audit.selfcheck``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from privstream.audit.events import Event, Sample
from privstream.audit.sampling import PipelineSampler
from privstream.audit.stats import (
    cp_lower,
    cp_upper,
    epsilon_lower_bound,
    false_pass_probability,
    per_interval_level,
    plug_in_epsilon,
)
from privstream.errors import AuditError

#: default draws per audited input: the demo config audits in well under 2 minutes
DEFAULT_SAMPLES = 100_000
#: default overall confidence of one audit run (false-failure probability 1e-3)
DEFAULT_CONFIDENCE = 0.999

Progress = Callable[[str], None]


def pilot_size(samples: int) -> int:
    """Draws per input of the pilot sample: ``max(1000, n/20)`` (never more than ``n``)."""
    return min(samples, max(1000, samples // 20))


@dataclass
class Scenario:
    """Everything one audit needs; ``draw(i, n)`` returns ``n`` outputs of input ``i``."""

    name: str
    mechanism: str
    epsilon: float
    delta: float
    input_labels: list[str]
    pairs: list[tuple[int, int]]
    draw: Callable[[int, int], Sample]
    #: the test sets, from the pilot samples (None without pilot) and the main sample size
    build_events: Callable[[Sequence[Sample] | None, int], list[Event]]
    needs_pilot: bool
    notes: list[str] = field(default_factory=list)
    #: self-check only: True if the mechanism is known to break its claim
    expect_violation: bool | None = None
    #: self-check only: the true ``P[output of input i in S]``, when known exactly
    exact: Callable[[Event, int], float] | None = None
    #: self-check only: what the scenario shows
    about: str = ""
    #: (set label, input a, input b): observed frequencies shown in the report (Example 4.5)
    show: list[tuple[str, int, int]] = field(default_factory=list)
    #: the sampler behind ``draw`` (to count the records it ran through the pipeline)
    sampler: PipelineSampler | None = None
    #: draws per input at most, below the run's (aggregates: one release per draw is slow)
    max_samples: int | None = None


@dataclass(frozen=True)
class Observed:
    """The observed frequency of one set under two inputs (shown for Example 4.5)."""

    event: str
    under: str
    versus: str
    p_hat: float
    q_hat: float


@dataclass(frozen=True)
class AuditResult:
    """The outcome of one audit."""

    name: str
    mechanism: str
    claimed_epsilon: float
    claimed_delta: float
    #: the largest ``ln((L - delta)/U)``; ``-inf`` when no set gave a bound
    epsilon_lower_bound: float
    worst_event: str | None
    worst_pair: str | None
    #: ``P_hat`` of the worst set under both inputs, and the plug-in epsilon there
    p_hat: float | None
    q_hat: float | None
    point_estimate: float | None
    samples: int
    pilot_samples: int
    inputs: int
    test_sets: int
    alpha: float
    seconds: float
    notes: tuple[str, ...] = ()
    expect_violation: bool | None = None
    #: upper bound on the chance that this (broken) mechanism passes; None if unknown
    false_pass_bound: float | None = None
    about: str = ""
    observed: tuple[Observed, ...] = ()

    @property
    def passed(self) -> bool:
        """No set showed more than the claimed epsilon."""
        return not self.epsilon_lower_bound > self.claimed_epsilon

    @property
    def as_expected(self) -> bool:
        """Self-check: broken mechanisms fail, calibrated ones pass (config audits: passed)."""
        if self.expect_violation is None:
            return self.passed
        return self.passed != self.expect_violation


def event_counts(sample: Sample, events: Sequence[Event]) -> NDArray[np.int64]:
    """How many outputs of ``sample`` fall in each of ``events``."""
    return np.array([int(np.count_nonzero(e.mask(sample))) for e in events], dtype=np.int64)


def run_scenario(
    scenario: Scenario,
    samples: int,
    alpha: float,
    progress: Progress | None = None,
) -> AuditResult:
    """Pilot, count, bound (module docstring)."""
    began = time.perf_counter()
    if scenario.max_samples is not None:
        samples = min(samples, scenario.max_samples)
    inputs = len(scenario.input_labels)
    pilot_n = pilot_size(samples) if scenario.needs_pilot else 0
    pilot = [scenario.draw(i, pilot_n) for i in range(inputs)] if scenario.needs_pilot else None
    events = scenario.build_events(pilot, samples)
    if not events:
        raise AuditError(f"{scenario.name}: no test set to check")
    counts = np.stack([event_counts(scenario.draw(i, samples), events) for i in range(inputs)])
    beta = per_interval_level(alpha, inputs, len(events))
    lower = cp_lower(counts, samples, beta)
    upper = cp_upper(counts, samples, beta)
    best, where = -math.inf, None
    for i, j in scenario.pairs:
        bounds = epsilon_lower_bound(lower[i], upper[j], scenario.delta)
        s = int(np.argmax(bounds))
        if bounds[s] > best or where is None:
            best, where = float(bounds[s]), (i, j, s)
    assert where is not None  # noqa: S101 -- at least one pair
    i, j, s = where
    found = best > -math.inf
    false_pass = None
    if scenario.exact is not None and scenario.expect_violation:
        false_pass = min(
            false_pass_probability(
                samples,
                scenario.exact(event, a),
                scenario.exact(event, b),
                beta,
                scenario.epsilon,
                scenario.delta,
            )
            for event in events
            for a, b in scenario.pairs
        )
    labels = [e.label for e in events]
    observed = [
        Observed(
            label,
            scenario.input_labels[a],
            scenario.input_labels[b],
            float(counts[a, labels.index(label)]) / samples,
            float(counts[b, labels.index(label)]) / samples,
        )
        for label, a, b in scenario.show
        if label in labels
    ]
    elapsed = time.perf_counter() - began
    result = AuditResult(
        name=scenario.name,
        mechanism=scenario.mechanism,
        claimed_epsilon=scenario.epsilon,
        claimed_delta=scenario.delta,
        epsilon_lower_bound=best,
        worst_event=events[s].label if found else None,
        worst_pair=f"{scenario.input_labels[i]} vs {scenario.input_labels[j]}" if found else None,
        p_hat=float(counts[i, s]) / samples if found else None,
        q_hat=float(counts[j, s]) / samples if found else None,
        point_estimate=plug_in_epsilon(
            int(counts[i, s]), int(counts[j, s]), samples, scenario.delta
        )
        if found
        else None,
        samples=samples,
        pilot_samples=pilot_n,
        inputs=inputs,
        test_sets=len(events),
        alpha=alpha,
        seconds=elapsed,
        notes=tuple(scenario.notes),
        expect_violation=scenario.expect_violation,
        false_pass_bound=false_pass,
        about=scenario.about,
        observed=tuple(observed),
    )
    if progress is not None:
        verdict = "pass" if result.passed else "FAIL"
        progress(
            f"{scenario.name}: eps_lb {best:.4g} vs claimed {scenario.epsilon:.4g} "
            f"({verdict}; {inputs} inputs x {samples} draws, {len(events)} sets, {elapsed:.1f} s)"
        )
    return result
