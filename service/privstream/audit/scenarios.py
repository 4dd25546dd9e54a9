r"""The audits of a config: per-field and whole-record scenarios of a plan.

Each is a ``privstream.audit.engine.Scenario``; ``run_scenario`` runs it.

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
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from privstream.audit.by_kind import target_for
from privstream.audit.engine import Scenario, event_counts
from privstream.audit.events import AllOf, Event, Sample
from privstream.audit.sampling import PipelineSampler, RecordSpec
from privstream.audit.stats import cp_lower, cp_upper, epsilon_lower_bound
from privstream.audit.targets import Target
from privstream.errors import AuditError, Rejected
from privstream.pipeline import RecordPlan
from privstream.pipeline.handlers import FieldHandler
from privstream.pipeline.missing import PresenceHandler

#: how the record's product events are picked on the pilot (``_projected_score``)
_PILOT_PESSIMISM = 0.16
_MAIN_Z = 4.75


def all_pairs(count: int) -> list[tuple[int, int]]:
    """Every ordered pair of distinct inputs (both directions of the DP inequality)."""
    return [(i, j) for i, j in itertools.permutations(range(count), 2)]


#: values for a field released without noise, in order of preference: any JSON value does
#: for public fields, a timestamp field without epsilon takes the epoch number
_FILLERS: tuple[object, ...] = ("audit", 0)


def _filler(handler: FieldHandler) -> object:
    """The first of ``_FILLERS`` the field's parser accepts (the pipeline must release it)."""
    for value in _FILLERS:
        try:
            handler.parse(value)
        except Rejected:
            continue
        return value
    raise AuditError(f"field {handler.name!r}: no audit value its parser accepts")


class PlanAuditor:
    """Builds the per-field and whole-record scenarios of one plan."""

    def __init__(self, plan: RecordPlan) -> None:
        self.plan = plan
        self.targets = [target_for(f) for f in plan.fields if f.handler.mechanism is not None]
        self.by_name = {t.name: t for t in self.targets}
        # fields memoized by the message key draw fresh words here (no keys: ``unkeyed``)
        self.memo_of = {
            f.name: f.memo.field
            for f in plan.fields
            if f.memo is not None and f.memo.field is not None
        }
        # a presence bit (``presence_epsilon``) reads whether its field is there: its inputs
        # are records with the field present (true) or absent (false)
        self.presence_of = {
            f.name: f.handler.source for f in plan.fields if isinstance(f.handler, PresenceHandler)
        }

    def _base(self) -> dict[str, object]:
        """A valid value for every field the pipeline reads: first inputs, memo ids."""
        base: dict[str, object] = {}
        for handler in self.plan.handlers:
            target = self.by_name.get(handler.name)
            base[handler.name] = target.inputs[0] if target is not None else _filler(handler)
        for memo in self.memo_of.values():
            base.setdefault(memo, "audit-device")
        return base

    def _specs(
        self, examined: Sequence[Target], values: Sequence[Mapping[str, object]]
    ) -> list[RecordSpec]:
        """One record per input: the base with ``values[i]`` over it, memo ids made unique."""
        unique: list[str] = []
        for target in examined:
            memo = self.memo_of.get(target.name)
            if memo is not None and memo not in unique:
                unique.append(memo)
        base = self._base()
        specs = []
        for value in values:
            fixed = {**base, **{k: v for k, v in value.items() if k not in unique}}
            for name in unique:
                fixed.pop(name, None)
            for bit, source in self.presence_of.items():
                fixed.pop(bit, None)  # no such record key; present unless examined as false
                if value.get(bit, True) is False:
                    fixed.pop(source, None)
            specs.append(RecordSpec(fixed, tuple(unique)))
        return specs

    def field_plan(self, name: str) -> RecordPlan:
        """The plan restricted to field ``name``: its handler, memo plan and field id.

        ``process_batch`` releases each field from its own handler and its own
        noise column, so field ``name``'s output law is the same under the
        full plan; the restriction saves running every other mechanism on
        every draw of a per-field audit. The whole-record audit runs the full
        plan.
        """
        fields = tuple(f for f in self.plan.fields if f.name == name)
        return dataclasses.replace(self.plan, fields=fields)

    def field_scenario(self, name: str) -> Scenario:
        """Neighbours differing in field ``name`` only; its own claim."""
        target = self.by_name.get(name)
        if target is None:
            raise AuditError(f"field {name!r} has no mechanism to audit")
        values = [{name: v} for v in target.inputs]
        specs = self._specs([target], values)
        notes: list[str] = []
        if name in self.memo_of:
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
        specs = self._specs(targets, values)
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
                event_counts(pilot[a], family), event_counts(pilot[b], family), n, samples, delta
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
