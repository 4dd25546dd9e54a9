r"""Resolve ``mechanism: auto`` of a real field: the least regret over every data spread.

The candidates are Laplace (``privstream.mechanisms.laplace``, with the
field's calibration and delta: ``tight`` by default, ``thesis`` when
declared), the Piecewise Mechanism, the Hybrid Mechanism, PM-SUB,
Duchi et al.'s mechanism and Three-Outputs (``piecewise``, ``hybrid``,
``pm_sub``, ``duchi``, ``three_outputs``), each built at the field's
resolved (epsilon, delta). Gaussian is not a candidate: it is chosen for
its composition, not its one-shot variance.

The criterion. With ``t`` a value mapped to ``[-1, 1]``, every candidate
states its per-record variance law ``Var[y | t] = s t^2 + u |t| + c``
(``privstream.mechanisms.variance_law``; Laplace: flat; PM, PM-SUB:
``s > 0``; Duchi et al.: ``s = -1``; HM: a mix of PM and Duchi; all these
``u = 0``; Three-Outputs: ``s = -1``, ``u > 0``). The variance of the mean
of ``n`` reports is ``(s E[t^2] + u E|t| + c) / n`` over the data, and no
single mechanism is best for every data spread: Duchi's is the least at the
bounds, PM-SUB's for data off them from eps ~3 on, Three-Outputs' between.
``auto`` picks the candidate whose largest ratio to the best candidate *on
the same data*, over every data spread, is the least (minimax regret). The
ratio is largest for data at one ``|t| = a``, and over ``a`` it peaks at 0,
1 or where a ratio of two laws turns (``regrets``), all computed exactly
from the laws. The choice depends on (epsilon, delta, calibration) only,
never on the bounds (all laws scale with ``diam^2``) nor on the data, and
is deterministic from the config.

Where it lands at delta 0: HM below eps ~0.61, Duchi's up to ~0.7,
Three-Outputs up to ~2.9, PM-SUB above (``explain`` prints the regrets). A
field that declares ``spread`` (``wide``: ``E|t| = 1/2``, ``E[t^2] =
1/3``, values spread over the bounds; ``near_bounds``: ``|t| = 1``) gets
the least variance there instead (Duchi's at ``near_bounds`` from eps
~0.6, where it parts from HM; ties to HM below).
The local mechanisms are pure epsilon-DP: a delta > 0 only helps Laplace
(``b = diam / (eps - 2 ln(1 - delta))`` tight, ``diam / (eps - ln(1 -
delta))`` thesis), which wins once delta is large enough to pay for its
heavier tail (``explain`` says so). Ties go to the first of ``CANDIDATES``.
The analyst's interval does not rest on this choice: ``estimate`` uses the
chosen mechanism's own variance law.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from privstream.config import Guarantee
from privstream.config.fields import IntegerField, RealField
from privstream.errors import MechanismError, RegistryError
from privstream.kinds.base import AutoChoice
from privstream.kinds.registry import registration_of
from privstream.mechanisms.base import Mechanism
from privstream.mechanisms.selection import VARIANCE_N
from privstream.mechanisms.variance_law import VarianceLaw, ratio_turning_points

#: candidates in tie-break order
CANDIDATES = ("laplace", "piecewise", "hybrid", "pm_sub", "duchi", "three_outputs")
#: the local mechanisms among them (pure epsilon-DP)
LOCAL = CANDIDATES[1:]
#: an ``integer`` field's candidates: discrete Laplace in Laplace's place (the integer is a
#: real in its bounds for the others, which release reals)
INTEGER_CANDIDATES = ("discrete_laplace", *LOCAL)
#: the means of ``|t|`` and of ``t^2`` a declared ``spread`` stands for
SPREAD_MOMENTS = {"wide": (0.5, 1.0 / 3.0), "near_bounds": (1.0, 1.0)}


#: a candidate's variance law and its worst-case variance of the mean at ``VARIANCE_N``
Measures = tuple[VarianceLaw, float]
#: the fields ``auto`` resolves here
MeanField = RealField | IntegerField


def _names(spec: MeanField) -> tuple[str, ...]:
    """The candidates in tie-break order, the field's own Laplace first."""
    return CANDIDATES if isinstance(spec, RealField) else INTEGER_CANDIDATES


def _spread(spec: MeanField) -> str | None:
    return spec.spread if isinstance(spec, RealField) else None


def _measures(mechanism: Mechanism) -> Measures:
    law = mechanism.variance_law()
    if law is None:  # pragma: no cover - every candidate's mechanism states its law
        raise RegistryError(f"{mechanism.name} states no variance law; it cannot be a candidate")
    return law, _worst_variance(mechanism, VARIANCE_N)


@functools.lru_cache(maxsize=256)
def _candidate_measures(spec: MeanField, share: Guarantee) -> Measures | None:
    """One candidate's measures, built by its registration; None where it does not run (an
    epsilon too small for 64-bit thresholds). A build calibrates a sampler (up to ~20 ms) and
    the plan's ``auto`` and the declared-mechanism warnings ask for the same ones: the numbers
    are kept, not the build. ``spec`` names the candidate and carries no field name, so fields
    with the same bounds and share share the entry."""
    try:
        handler = registration_of(spec).build(spec, share)
    except MechanismError:
        return None
    mechanism = handler.mechanism
    if mechanism is None:  # pragma: no cover - real registrations are noised
        raise RegistryError(f"{spec.kind} ({spec.mechanism}) built no mechanism")
    return _measures(mechanism)


def _candidates(
    spec: MeanField, share: Guarantee, planned: Mechanism | None
) -> dict[str, Measures]:
    """Each candidate that runs at this share; ``planned`` (the field's own mechanism, built
    by the plan from this spec and share) is measured instead of a build of the same one."""
    built: dict[str, Measures] = {}
    reuse = None
    if planned is not None and (planned.epsilon, planned.delta) == (share.epsilon, share.delta):
        reuse = planned
    for name in _names(spec):
        if reuse is not None and reuse.name == name:
            measures: Measures | None = _measures(reuse)
        else:
            candidate = spec.model_copy(update={"name": "auto", "mechanism": name})
            measures = _candidate_measures(candidate, share)
        if measures is not None:
            built[name] = measures
    return built


def regrets(laws: dict[str, VarianceLaw]) -> dict[str, float]:
    """Each law's largest ratio to the least variance over every data spread.

    The worst spread is data at one ``|t| = a`` (``privstream.mechanisms.variance_law``),
    and ``f_i(a) / min_j f_j(a) = max_j f_i(a) / f_j(a)`` peaks at ``a = 0``, ``a = 1`` or
    where some pair's ratio turns, all computed from the laws.
    """
    points = {0.0, 1.0}
    for first in laws.values():
        for second in laws.values():
            points.update(ratio_turning_points(first, second))
    worst: dict[str, float] = dict.fromkeys(laws, 1.0)
    for a in sorted(points):
        at = {name: law.at(a) for name, law in laws.items()}
        best = min(at.values())
        for name, v in at.items():
            ratio = 1.0 if v == best else (v / best if best > 0.0 else math.inf)
            worst[name] = max(worst[name], ratio)
    return worst


def _worst_variance(mechanism: Mechanism, n: int) -> float:
    """Worst-case noise variance of the mean at ``n`` records."""
    try:
        return mechanism.estimator_variance(n)
    except OverflowError:  # bounds near the double range: no finite variance to compare
        return math.inf


def _why(variances: dict[str, float], share: Guarantee, laplace: str) -> str | None:
    """Why (discrete) Laplace beats the local mechanisms, when it does."""
    local = [variances[name] for name in LOCAL if name in variances]
    if laplace not in variances or not local or variances[laplace] > min(local):
        return None
    if share.delta > 0.0:
        return (
            f"{laplace} spends delta {share.delta:g} (the local mechanisms are pure epsilon-DP), "
            "which narrows its noise below theirs"
        )
    return f"{laplace}'s variance is the least at this epsilon"


def _assess(
    spec: MeanField, share: Guarantee, planned: Mechanism | None = None
) -> tuple[AutoChoice, dict[str, float]]:
    """The choice and each candidate's regret (``_candidate_measures``: measured once)."""
    built = _candidates(spec, share, planned)
    variances = {name: variance for name, (_, variance) in built.items()}
    names = _names(spec)
    ranked = [name for name in names if name in variances]
    if not ranked:  # pragma: no cover - Laplace runs at every epsilon the config accepts
        return AutoChoice(mechanism=names[0], variances={}, restricted="no candidate"), {}
    laws = {name: law for name, (law, _) in built.items()}
    regret = regrets(laws)
    spread = _spread(spec)
    if spread is None:
        chosen = min(ranked, key=lambda name: (regret[name], ranked.index(name)))
    else:
        moments = SPREAD_MOMENTS[spread]
        chosen = min(ranked, key=lambda name: (laws[name].mean(*moments), ranked.index(name)))
    restricted = _why(variances, share, names[0])
    return AutoChoice(mechanism=chosen, variances=variances, restricted=restricted), regret


def auto_real_choice(spec: MeanField, share: Guarantee) -> AutoChoice:
    """The mechanism ``auto`` gives this real or integer field at its resolved share."""
    return _assess(spec, share)[0]


def real_regrets(spec: MeanField, share: Guarantee) -> dict[str, float]:
    """Each candidate's largest ratio to the best over every data spread (the criterion)."""
    return _assess(spec, share)[1]


def resolve_auto_real(spec: MeanField, share: Guarantee) -> MeanField:
    """The spec with ``mechanism: auto`` replaced by the chosen mechanism."""
    chosen = auto_real_choice(spec, share).mechanism
    # no re-validation: the calibration (tight by default) stays for laplace's release id
    return spec.model_copy(update={"mechanism": chosen})


def explain_auto_real(
    spec: MeanField, share: Guarantee, warn_ratio: float, planned: Mechanism | None = None
) -> dict[str, Any]:
    """``explain``'s ``auto`` entry of a real or integer field (same shape as the categorical
    one).

    ``planned``: the field's mechanism in the plan, reused if it is one of the candidates.
    """
    choice, regret = _assess(spec, share, planned)
    declared = regret.get(spec.mechanism)  # gaussian is not compared
    best = regret[choice.mechanism]
    warning = None
    if declared is not None and declared > warn_ratio * best:
        # an integer field's default stays discrete_laplace: auto must be written
        fix = "drop mechanism:" if isinstance(spec, RealField) else "write mechanism: auto"
        warning = (
            f"{spec.name}: {spec.mechanism} has up to {declared / best:.3g}x the variance of "
            f"the mean of {choice.mechanism} (what mechanism: auto picks), over every data "
            f"spread; {fix} to use it"
        )
    spread = _spread(spec)
    return {
        "auto": {
            "declared": spec.mechanism,
            "chosen": choice.mechanism,
            "criterion": "worst-case variance of the mean",
            "rule": "least regret over every data spread"
            if spread is None
            else f"least variance of the mean at spread {spread} (mean |t| "
            f"{SPREAD_MOMENTS[spread][0]:.3g}, mean t^2 {SPREAD_MOMENTS[spread][1]:.3g})",
            "candidate_regrets": regret,
            "variances_n": choice.n,
            "candidate_variances": choice.variances,
            "restricted": choice.restricted,
        },
        "auto_warning": warning,
    }
