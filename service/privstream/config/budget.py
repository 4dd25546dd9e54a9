r"""From the declared budget to the (epsilon, delta) each mechanism is calibrated with.

Basic composition (DESIGN §1): a record's fields are independent
mechanisms, so the record is ``(sum eps_j, sum delta_j)``-DP. The config
declares a per-record budget; the fields' shares must fit in it, and
``epsilon: auto`` shares out what the explicit fields leave, evenly.

Group privacy (``privacy.group_size: k``): if one individual stands behind
up to ``k`` records, an ``(eps, delta)``-DP record mechanism is
``(k eps, k e^{(k-1) eps} delta)``-DP for that individual. With ``k > 1``
the declared budget is the *group-level* target, and each field is
calibrated at ``eps_j / k`` and ``delta_j / (k e^{(k-1) eps_e})`` where
``eps_e = sum(eps_j) / k`` is the event-level record epsilon. Then the
group guarantee is ``(k eps_e, k e^{(k-1) eps_e} delta_e) = (sum eps_j,
sum delta_j)``: exactly the declared shares. ``k = 1`` changes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from privstream.config.aggregates import aggregate_charge, exact_charge
from privstream.config.fields import NoisedField
from privstream.config.ledger import DELTA_UNITS, EPSILON_UNITS, cap_units, cost_units
from privstream.config.missing import presence_name
from privstream.config.models import AppConfig

#: relative slack when comparing summed field budgets with the record budget,
#: so that 0.1 + 0.2 fits in 0.3; the guarantee stated everywhere is the sum itself
BUDGET_RELATIVE_SLACK = 1e-9


@dataclass(frozen=True)
class Guarantee:
    epsilon: float
    delta: float


@dataclass(frozen=True)
class Budget:
    """Per-field calibration budgets and the record's event- and group-level guarantee."""

    fields: dict[str, Guarantee]
    declared: dict[str, Guarantee]
    group_size: int
    event: Guarantee
    group: Guarantee


def noised_fields(config: AppConfig) -> list[NoisedField]:
    """The fields that consume privacy budget (those with an epsilon), in config order."""
    return [f for f in config.fields if getattr(f, "epsilon", None) is not None]  # type: ignore[misc]


def presence_shares(fields: list[NoisedField]) -> dict[str, float]:
    """The declared epsilon of each presence bit (``presence_epsilon``), by output key."""
    return {
        presence_name(f.name): epsilon
        for f in fields
        # a timestamp field has no presence bit (nor on_missing)
        if (epsilon := getattr(f, "presence_epsilon", None)) is not None
    }


def _explicit(fields: list[NoisedField]) -> float:
    """The explicit epsilons: the fields' and their presence bits'."""
    shares = [float(f.epsilon) for f in fields if f.epsilon != "auto"]
    return math.fsum([*shares, *presence_shares(fields).values()])


def _auto_share(config: AppConfig, fields: list[NoisedField]) -> float | None:
    explicit = _explicit(fields) + aggregate_charge(config.aggregates)[0]
    autos = sum(1 for f in fields if f.epsilon == "auto")
    left = config.privacy.epsilon - explicit
    if autos == 0:
        return 0.0
    return left / autos if left > 0 else None


#: how the aggregates enter the budget messages (``aggregate_charge``)
_AGGREGATES_TOO = " (with each aggregate's 2 eps and (1 + e^eps) delta)"


def budget_problems(config: AppConfig) -> list[str]:
    """Everything wrong with the fields' shares, one line each."""
    fields = noised_fields(config)
    charge = aggregate_charge(config.aggregates)
    too = _AGGREGATES_TOO if config.aggregates else ""
    if _auto_share(config, fields) is None:
        explicit = _explicit(fields) + charge[0]
        limit = config.privacy.epsilon
        used = "all of" if explicit <= limit else "more than"
        return [
            f"privacy.epsilon: the explicit field epsilons{too} sum to "
            f"{explicit:g}, {used} the per-record budget {limit:g}, so nothing is left for the "
            "fields with epsilon: auto; lower the explicit epsilons or raise privacy.epsilon"
        ]
    budget = resolve_budget(config)
    problems = [
        f"privacy.group_size: with group_size {budget.group_size} the delta of field "
        f"{name!r} shrinks below the smallest double; lower epsilon or group_size"
        for name, g in budget.fields.items()
        if g.delta == 0.0 and budget.declared[name].delta > 0.0
    ]
    declared_eps = math.fsum([*(g.epsilon for g in budget.declared.values()), charge[0]])
    declared_dlt = math.fsum([*(g.delta for g in budget.declared.values()), charge[1]])
    for label, total, limit in (
        ("epsilon", declared_eps, config.privacy.epsilon),
        ("delta", declared_dlt, config.privacy.delta),
    ):
        if total > limit * (1.0 + BUDGET_RELATIVE_SLACK):
            problems.append(
                f"privacy.{label}: the fields' {label}s{too} sum to {total:g}, above "
                f"the per-record budget {limit:g}; lower the fields' {label}s or raise "
                f"privacy.{label}"
            )
    return problems


def resolve_budget(config: AppConfig) -> Budget:
    """Resolve ``auto`` shares and group scaling (call after ``budget_problems`` is empty)."""
    fields = noised_fields(config)
    share = _auto_share(config, fields) or 0.0
    declared = {
        f.name: Guarantee(share if f.epsilon == "auto" else float(f.epsilon), f.delta)
        for f in fields
    }
    # a presence bit is one more randomized response of the record: it composes like a field
    declared.update({key: Guarantee(eps, 0.0) for key, eps in presence_shares(fields).items()})
    k = config.privacy.group_size
    event_eps = math.fsum(g.epsilon for g in declared.values()) / k
    log_factor = math.log(k) + (k - 1) * event_eps  # ln(k e^{(k-1) eps_e}), no overflow
    calibrated = {
        name: Guarantee(g.epsilon / k, g.delta * math.exp(-log_factor))
        for name, g in declared.items()
    }
    event = Guarantee(
        math.fsum(g.epsilon for g in calibrated.values()),
        math.fsum(g.delta for g in calibrated.values()),
    )
    group = Guarantee(k * event.epsilon, math.fsum(g.delta for g in declared.values()))
    return Budget(calibrated, declared, k, event, group)


def record_cost(config: AppConfig) -> tuple[Fraction, Fraction]:
    """What one released record costs its subject: the record's (epsilon, delta).

    The fields' event-level sum (basic composition), plus the clamped counts'
    epsilon when they are on: a released record enters them too. Summed
    exactly over the fields' shares (each a double the mechanism is calibrated
    to), not as a rounded double: ``0.1 + 0.9`` is a little above 1.
    """
    shares = resolve_budget(config).fields.values()
    clamped = config.metrics.clamped_counts
    eps = sum((Fraction(g.epsilon) for g in shares), Fraction(0))
    if clamped is not None:
        eps += Fraction(clamped.epsilon)
    return eps, sum((Fraction(g.delta) for g in shares), Fraction(0))


def ledger_problems(config: AppConfig) -> list[str]:
    """The ledger's caps must admit at least one record of the configured cost."""
    ledger = config.privacy.ledger
    if ledger is None:
        return []
    eps, delta = record_cost(config)
    caps = [
        ("epsilon", eps, ledger.epsilon, EPSILON_UNITS),
        ("delta", delta, ledger.delta, DELTA_UNITS),
    ]
    if ledger.lifetime_epsilon is not None:
        caps.append(("lifetime_epsilon", eps, ledger.lifetime_epsilon, EPSILON_UNITS))
    problems = [
        f"privacy.ledger.{name}: one record costs {name.removeprefix('lifetime_')} "
        f"{float(cost):g} "
        f"> cap {cap:g}, so no record could ever be released; raise privacy.ledger.{name} "
        "or lower the record's budget (privacy.epsilon, the fields' shares)"
        for name, cost, cap, per in caps
        if cost_units(cost, per) > cap_units(cap, per)
    ]
    return problems + _aggregate_cap_problems(config)


def _aggregate_cap_problems(config: AppConfig) -> list[str]:
    """Each aggregate's window must fit the ledger's caps: a subject's contribution to one
    window costs (2 eps, (1 + e^eps) delta) (docs/proofs/ledger-aggregates.md)."""
    ledger = config.privacy.ledger
    if ledger is None:
        return []
    problems = []
    for spec in config.aggregates:
        eps, delta = exact_charge(spec)  # what the ledger charges (AggregateCost)
        caps = [("epsilon", eps, ledger.epsilon, EPSILON_UNITS)]
        caps.append(("delta", delta, ledger.delta, DELTA_UNITS))
        if ledger.lifetime_epsilon is not None:
            caps.append(("lifetime_epsilon", eps, ledger.lifetime_epsilon, EPSILON_UNITS))
        problems += [
            f"aggregates ({spec.name}): one subject's window costs the ledger "
            f"{name.removeprefix('lifetime_')} {float(cost):g} (2 eps and (1 + e^eps) delta: a "
            f"changed subject is a removal and an addition) > privacy.ledger.{name} "
            f"{cap:g}, so no subject could ever enter it; lower the aggregate's epsilon or "
            f"delta, or raise privacy.ledger.{name}"
            for name, cost, cap, per in caps
            if cost_units(cost, per) > cap_units(cap, per)
        ]
    return problems
