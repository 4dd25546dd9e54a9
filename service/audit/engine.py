r"""Run audits: per field, for the whole record, and report the epsilon lower bounds.

One audit (a *scenario*) has a claimed (eps, delta), a list of inputs, the
ordered pairs of them that are neighbours, a way to draw ``n`` outputs of
an input, and a family of test sets. It runs in three steps:

1. **Pilot** (only when the family depends on the outputs' scale: real,
   integer, vector and functional fields): ``max(1000, n/20)`` draws per
   input, used only to place the thresholds (``service.audit.events``).
2. **Counting**: ``n`` fresh draws per input; ``K_i(S)`` for every input
   ``i`` and set ``S``.
3. **Bounds**: Clopper-Pearson at ``beta = alpha / (2 |I| |F|)`` and
   ``eps_lb = max over pairs (i, j) and S of ln((L_i(S) - delta) / U_j(S))``
   (``service.audit.stats``); the audit fails when ``eps_lb > eps``.

**Per field.** Only the audited field differs between the inputs; every
other field keeps a fixed valid value. Claimed: the mechanism's own
(eps, delta), the field's calibrated share of the record budget.

**Whole record.** Two inputs differing in *every* noised field at once, each
at its first two worst-case inputs (``lo`` vs ``hi``, ...). Claimed: the
record's (eps, delta) = the sums over fields (basic composition), what the
``privstream-epsilon`` / ``privstream-delta`` headers state. Test sets: each
field's own family, read on the joint release (a valid, if weak, bound for
the record: an event of one field is an event of the record), plus the
*product* events ``S_1 x ... x S_J``, one per direction, over fields
chosen greedily on the pilot (``_product_events``). For independent
fields, ``P[x in prod S_j] = prod_j P[x_j in S_j]``, so the ratios multiply: this is where the
composition of the fields' epsilons shows, and where a record that leaks
more than the sum would be caught. Per-field events alone cannot see it,
and the full product of all families would be far too many sets.

Group privacy (``group_size: k``) is not audited directly: the fields are
calibrated for ``eps_j / k`` and the audit checks those event-level
claims; the group-level guarantee follows from them by the group-privacy
theorem.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from service.audit.events import AllOf, Event, Sample
from service.audit.sampling import MemoStyle, PipelineSampler, RecordSpec
from service.audit.stats import (
    cp_lower,
    cp_upper,
    epsilon_lower_bound,
    false_pass_probability,
    per_interval_level,
    plug_in_epsilon,
)
from service.audit.targets import AuditError, Target, target_for
from service.pipeline import RecordPlan

#: default draws per audited input: the demo config audits in well under 2 minutes
DEFAULT_SAMPLES = 100_000
#: default overall confidence of one audit run (false-failure probability 1e-3)
DEFAULT_CONFIDENCE = 0.999
#: how the record's product events are picked on the pilot (``_projected_score``)
_PILOT_PESSIMISM = 0.16
_MAIN_Z = 4.75

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


def _counts(sample: Sample, events: Sequence[Event]) -> NDArray[np.int64]:
    return np.array([int(np.count_nonzero(e.mask(sample))) for e in events], dtype=np.int64)


def run_scenario(
    scenario: Scenario,
    samples: int,
    alpha: float,
    progress: Progress | None = None,
) -> AuditResult:
    """Pilot, count, bound (module docstring)."""
    began = time.perf_counter()
    inputs = len(scenario.input_labels)
    pilot_n = pilot_size(samples) if scenario.needs_pilot else 0
    pilot = [scenario.draw(i, pilot_n) for i in range(inputs)] if scenario.needs_pilot else None
    events = scenario.build_events(pilot, samples)
    if not events:
        raise AuditError(f"{scenario.name}: no test set to check")
    counts = np.stack([_counts(scenario.draw(i, samples), events) for i in range(inputs)])
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


# --- scenarios of a config ----------------------------------------------------------------


def all_pairs(count: int) -> list[tuple[int, int]]:
    """Every ordered pair of distinct inputs (both directions of the DP inequality)."""
    return [(i, j) for i, j in itertools.permutations(range(count), 2)]


class PlanAuditor:
    """Builds the per-field and whole-record scenarios of one plan."""

    def __init__(self, plan: RecordPlan, styles: Mapping[str, MemoStyle | None]) -> None:
        self.plan = plan
        self.styles = dict(styles)
        self.targets = [target_for(h) for h in plan.handlers if h.mechanism is not None]
        self.by_name = {t.name: t for t in self.targets}
        self.memo_of = {
            h.name: m.field for h, m in zip(plan.handlers, plan.memos, strict=True) if m is not None
        }

    def _base(self) -> dict[str, object]:
        """A valid value for every field the pipeline reads: first inputs, memo ids."""
        base: dict[str, object] = {}
        for handler in self.plan.handlers:
            target = self.by_name.get(handler.name)
            base[handler.name] = target.inputs[0] if target is not None else "audit"
        for memo in self.memo_of.values():
            base.setdefault(memo, "audit-device")
        return base

    def _specs(
        self, examined: Sequence[Target], values: Sequence[Mapping[str, object]]
    ) -> tuple[list[RecordSpec], list[str]]:
        """One record per input: the base with ``values[i]`` over it, memo ids made unique."""
        notes: list[str] = []
        unique: dict[str, MemoStyle] = {}
        fresh = False
        differing = {name for v in values for name in v}
        for target in examined:
            memo = self.memo_of.get(target.name)
            if memo is None:
                continue
            style = self.styles.get(memo, "str")
            if style is None:
                fresh = True
                notes.append(
                    f"{target.name} is memoized by {memo}, which holds only domain values: "
                    "fresh CSPRNG words per draw (same law as one keyed answer)"
                )
            else:
                unique[memo] = style
                if memo in differing:
                    notes.append(
                        f"{memo} is {target.name}'s memo field: it takes a distinct value per "
                        "draw on both sides, so it does not differ here (audited on its own)"
                    )
        base = self._base()
        specs = []
        for value in values:
            fixed = {**base, **{k: v for k, v in value.items() if k not in unique}}
            for name in unique:
                fixed.pop(name, None)
            specs.append(RecordSpec(fixed, tuple(unique.items()), fresh))
        return specs, notes

    def field_plan(self, name: str) -> RecordPlan:
        """The plan restricted to field ``name``: its handler, memo plan and field id.

        ``process_batch`` releases each field from its own handler and its own
        noise column, so field ``name``'s output law is the same under the
        full plan; the restriction saves running every other mechanism on
        every draw of a per-field audit. The whole-record audit runs the full
        plan.
        """
        j = next(k for k, h in enumerate(self.plan.handlers) if h.name == name)
        return dataclasses.replace(
            self.plan,
            handlers=(self.plan.handlers[j],),
            kinds=(self.plan.kinds[j],),
            field_ids=(self.plan.field_ids[j],),
            memos=(self.plan.memos[j],),
        )

    def field_scenario(self, name: str) -> Scenario:
        """Neighbours differing in field ``name`` only; its own claim."""
        target = self.by_name.get(name)
        if target is None:
            raise AuditError(f"field {name!r} has no mechanism to audit")
        values = [{name: v} for v in target.inputs]
        specs, notes = self._specs([target], values)
        if name in self.memo_of and not specs[0].fresh_memo:
            notes.append(
                f"memoized by {self.memo_of[name]}: a distinct memo value (device) per draw, "
                "keyed memo words"
            )
        sampler = PipelineSampler(self.field_plan(name))
        all_inputs = list(range(len(values)))

        def draw(i: int, n: int) -> Sample:
            return sampler.sample(specs[i], n, [target])

        return Scenario(
            name=name,
            mechanism=target.label,
            epsilon=target.epsilon,
            delta=target.delta,
            input_labels=[target.input_label(i) for i in all_inputs],
            pairs=all_pairs(len(values)),
            draw=draw,
            build_events=lambda pilot, samples: target.events(pilot, all_inputs),
            needs_pilot=target.needs_pilot,
            notes=notes,
            sampler=sampler,
        )

    def record_scenario(self) -> Scenario:
        """Neighbours differing in every noised field at once; the record's claim."""
        targets = self.targets
        if not targets:
            raise AuditError("no field has a mechanism: nothing to audit")
        values = [{t.name: t.inputs[i] for t in targets} for i in (0, 1)]
        specs, notes = self._specs(targets, values)
        differing = [t for t in targets if specs[0].fixed.get(t.name) != specs[1].fixed.get(t.name)]
        sampler = PipelineSampler(self.plan)

        def draw(i: int, n: int) -> Sample:
            return sampler.sample(specs[i], n, targets)

        def build(pilot: Sequence[Sample] | None, samples: int) -> list[Event]:
            per_field = [t.events(pilot, [0, 1]) for t in differing]
            events: list[Event] = [e for family in per_field for e in family]
            if pilot is not None and len(differing) > 1:
                events.extend(_product_events(per_field, pilot, samples, self.plan.delta))
            return events

        return Scenario(
            name="record (all fields)",
            mechanism="basic composition of " + ", ".join(t.name for t in targets),
            epsilon=self.plan.epsilon,
            delta=self.plan.delta,
            input_labels=["all fields at first inputs", "all fields at second inputs"],
            pairs=[(0, 1), (1, 0)],
            draw=draw,
            build_events=build,
            needs_pilot=True,
            notes=notes,
            sampler=sampler,
        )


def _projected_score(
    k_a: NDArray[np.int64], k_b: NDArray[np.int64], pilot: int, samples: int, delta: float
) -> NDArray[np.float64]:
    """What a set is expected to show at ``samples`` draws, judged on the pilot counts.

    The ratio is read pessimistically from the pilot (one-sided 84% Clopper-
    Pearson bounds, about one standard deviation, so that a tail set with a
    handful of pilot draws does not look better than it is), then the width
    the main sample's intervals will have (``z sqrt((1 - p)/(n p))`` on each
    side, at a strict level) is subtracted: among sets with the same ratio,
    the more probable ones win.
    """
    lower = cp_lower(k_a, pilot, _PILOT_PESSIMISM)
    upper = cp_upper(k_b, pilot, _PILOT_PESSIMISM)
    ratio = epsilon_lower_bound(lower, upper, delta)
    p = np.maximum(k_a, 1) / pilot
    q = np.maximum(k_b, 1) / pilot
    width = _MAIN_Z * (np.sqrt((1 - p) / (samples * p)) + np.sqrt((1 - q) / (samples * q)))
    score: NDArray[np.float64] = ratio - width
    return score


def _product_events(
    per_field: Sequence[Sequence[Event]], pilot: Sequence[Sample], samples: int, delta: float
) -> list[Event]:
    """Per direction, an intersection of fields' sets chosen greedily on the pilot.

    Each field offers its set with the best *projected* score
    (``_projected_score``: roughly the bound the set will give at the main
    sample size, judged pessimistically on the pilot). Fields are
    added in order of their score as long as the projected score of the
    intersection grows: every factor multiplies the ratio but also shrinks
    the probability, and past a point the counts are too small to show it.
    """
    n = pilot[0].size
    products: list[Event] = []
    for a, b in ((0, 1), (1, 0)):
        offers: list[tuple[float, Event]] = []
        for family in per_field:
            scores = _projected_score(
                _counts(pilot[a], family), _counts(pilot[b], family), n, samples, delta
            )
            best = int(np.argmax(scores))
            if scores[best] > 0.0:
                offers.append((float(scores[best]), family[best]))
        offers.sort(key=lambda offer: -offer[0])
        parts: list[Event] = []
        inside_a = np.ones(n, dtype=np.bool_)
        inside_b = np.ones(n, dtype=np.bool_)
        current = -math.inf
        for _, event in offers:
            trial_a = inside_a & event.mask(pilot[a])
            trial_b = inside_b & event.mask(pilot[b])
            counts_a = np.array([np.count_nonzero(trial_a)])
            counts_b = np.array([np.count_nonzero(trial_b)])
            joint = float(_projected_score(counts_a, counts_b, n, samples, delta)[0])
            if joint > current:
                parts.append(event)
                inside_a, inside_b, current = trial_a, trial_b, joint
        if len(parts) > 1:
            products.append(AllOf(tuple(parts)))
    return products
