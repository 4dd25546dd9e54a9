r"""Resolve ``mechanism: auto`` of a real field: the least regret over every data spread.

The candidates are Laplace (``privstream.mechanisms.laplace``, with the
field's calibration and delta: ``tight`` by default, ``thesis`` when
declared), the Piecewise Mechanism and the Hybrid Mechanism
(``piecewise``, ``hybrid``), each built at the field's resolved (epsilon,
delta). Gaussian is not a candidate: it is chosen for its composition, not
its one-shot variance.

The criterion. With ``t`` a value mapped to ``[-1, 1]``, every candidate's
per-record variance is linear in ``t^2``: ``Var[y | t] = s t^2 + c``
(Laplace: ``s = 0``; PM: ``s > 0``, the window moves out with ``t``; HM:
a mix of PM and Duchi et al.'s ``s = -1``). The variance of the mean of
``n`` reports is therefore ``(s q + c) / n`` with ``q`` the mean of ``t^2``
over the data, and ``q`` is the only thing about the data that matters.
No single mechanism is best for every ``q``: HM has the least worst case
(``q = 1``), PM is better for data off the bounds from eps ~1 on. ``auto``
picks the candidate whose largest ratio to the best candidate *at the same
q*, over every ``q`` in ``[0, 1]``, is the least (minimax regret). The ratio
of two linear functions is monotone between the points where the best
candidate changes, so the maximum is taken at ``q = 0``, ``q = 1`` and the
crossing points, all computed exactly from the laws. The choice depends on
(epsilon, delta, calibration) only, never on the bounds (all laws scale
with ``diam^2``) nor on the data, and is deterministic from the config.

Where it lands at delta 0 (regret of each, eps 0.5 / 1 / 2 / 4): HM at eps
0.5 and 1, PM from about eps 2 on (``explain`` prints the numbers).
Piecewise and hybrid are pure epsilon-DP: a delta > 0 only helps Laplace
(``b = diam / (eps - 2 ln(1 - delta))`` tight, ``diam / (eps - ln(1 -
delta))`` thesis), which wins once delta is large enough to pay for its
heavier tail (``explain`` says so). Ties go to the first of ``CANDIDATES``.
The analyst's interval does not rest on this choice: ``estimate`` uses the
chosen mechanism's own variance law.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any, Literal

from privstream.config import Guarantee
from privstream.config.fields import RealField
from privstream.errors import MechanismError, RegistryError
from privstream.kinds.base import AutoChoice
from privstream.mechanisms.base import Mechanism
from privstream.mechanisms.hybrid import HybridMechanism
from privstream.mechanisms.laplace import LaplaceMechanism
from privstream.mechanisms.piecewise import PiecewiseMechanism
from privstream.mechanisms.selection import VARIANCE_N

#: candidates in tie-break order
CANDIDATES = ("laplace", "piecewise", "hybrid")


#: what builds a candidate: (name, lower, upper, epsilon, delta, laplace calibration or None)
CandidateKey = tuple[str, float, float, float, float, str | None]


def _key(name: str, spec: RealField, share: Guarantee) -> CandidateKey:
    calibration = (
        ("thesis" if spec.calibration == "thesis" else "tight") if name == "laplace" else None
    )
    lower, upper = float(spec.bounds[0]), float(spec.bounds[1])
    return name, lower, upper, share.epsilon, share.delta, calibration


def _key_of(mechanism: Mechanism) -> CandidateKey | None:
    """The key ``mechanism`` would have been built from, if it is a candidate."""
    if isinstance(mechanism, LaplaceMechanism):
        calibration: str | None = mechanism.calibration
    elif isinstance(mechanism, PiecewiseMechanism | HybridMechanism):
        calibration = None
    else:
        return None
    lower, upper = mechanism.lower, mechanism.upper
    return mechanism.name, lower, upper, mechanism.epsilon, mechanism.delta, calibration


#: a candidate's variance law ``(s, c)`` and its worst-case variance of the mean at ``VARIANCE_N``
Measures = tuple[tuple[float, float], float]


def _measures(mechanism: Mechanism) -> Measures:
    return _law(mechanism), _worst_variance(mechanism, VARIANCE_N)


@functools.lru_cache(maxsize=256)
def _candidate_measures(key: CandidateKey) -> Measures | None:
    """One candidate's measures, None where it does not run (an epsilon too small for 64-bit
    thresholds). A build calibrates a sampler (up to ~20 ms) and the plan's ``auto`` and the
    declared-mechanism warnings ask for the same ones: the numbers are kept, not the build."""
    name, lower, upper, epsilon, delta, calibration = key
    bounds = (lower, upper)
    mechanism: Mechanism
    try:
        if name == "laplace":
            tight: Literal["tight", "thesis"] = "thesis" if calibration == "thesis" else "tight"
            mechanism = LaplaceMechanism(
                bounds=bounds, epsilon=epsilon, delta=delta, calibration=tight
            )
        else:
            local = PiecewiseMechanism if name == "piecewise" else HybridMechanism
            mechanism = local(bounds=bounds, epsilon=epsilon, delta=delta)
    except MechanismError:
        return None
    return _measures(mechanism)


def _candidates(
    spec: RealField, share: Guarantee, planned: Mechanism | None
) -> dict[str, Measures]:
    """Each candidate that runs at this share; ``planned`` (the field's own mechanism, built
    from the same inputs by the plan) is measured instead of a build of the same candidate."""
    reuse = _key_of(planned) if planned is not None else None
    built: dict[str, Measures] = {}
    for name in CANDIDATES:
        key = _key(name, spec, share)
        if planned is not None and key == reuse:
            measures: Measures | None = _measures(planned)
        else:
            measures = _candidate_measures(key)
        if measures is not None:
            built[name] = measures
    return built


def _law(mechanism: Mechanism) -> tuple[float, float]:
    """``(s, c)``: ``Var[y | t] = s t^2 + c`` in ``t`` units (Laplace's noise is flat)."""
    if isinstance(mechanism, PiecewiseMechanism | HybridMechanism):
        return mechanism.variance_law()
    if not isinstance(mechanism, LaplaceMechanism):  # pragma: no cover - CANDIDATES are these
        raise RegistryError(f"no variance law for {type(mechanism).__name__}")
    half = (mechanism.upper - mechanism.lower) / 2.0
    noise = mechanism.noise
    if half <= 0.0 or noise is None:  # zero width: no noise
        return 0.0, 0.0
    square = half * half
    if math.isfinite(square):
        with contextlib.suppress(OverflowError):
            return 0.0, mechanism.estimator_variance(1) / square
    # bounds near the double range (g^2 or half^2 beyond it): g / half before squaring
    return 0.0, (mechanism.granularity / half) ** 2 * noise.variance


def regrets(laws: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Each law's largest ratio to the least variance at the same ``q`` in ``[0, 1]``."""
    points = {0.0, 1.0}
    for s1, c1 in laws.values():
        for s2, c2 in laws.values():
            if s1 != s2 and 0.0 < (q := (c2 - c1) / (s1 - s2)) < 1.0:
                points.add(q)
    worst: dict[str, float] = dict.fromkeys(laws, 1.0)
    for q in sorted(points):
        at = {name: s * q + c for name, (s, c) in laws.items()}
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


def _why(variances: dict[str, float], share: Guarantee) -> str | None:
    """Why Laplace beats the local mechanisms, when it does."""
    local = [variances[name] for name in ("piecewise", "hybrid") if name in variances]
    if "laplace" not in variances or not local or variances["laplace"] > min(local):
        return None
    if share.delta > 0.0:
        return (
            f"laplace spends delta {share.delta:g} (piecewise and hybrid are pure epsilon-DP), "
            "which narrows its noise below theirs"
        )
    return "laplace's variance is the least at this epsilon"


def _assess(
    spec: RealField, share: Guarantee, planned: Mechanism | None = None
) -> tuple[AutoChoice, dict[str, float]]:
    """The choice and each candidate's regret (``_candidate_measures``: measured once)."""
    built = _candidates(spec, share, planned)
    variances = {name: variance for name, (_, variance) in built.items()}
    ranked = [name for name in CANDIDATES if name in variances]
    if not ranked:  # pragma: no cover - Laplace runs at every epsilon the config accepts
        return AutoChoice(mechanism="laplace", variances={}, restricted="no candidate"), {}
    regret = regrets({name: law for name, (law, _) in built.items()})
    chosen = min(ranked, key=lambda name: (regret[name], ranked.index(name)))
    choice = AutoChoice(mechanism=chosen, variances=variances, restricted=_why(variances, share))
    return choice, regret


def auto_real_choice(spec: RealField, share: Guarantee) -> AutoChoice:
    """The mechanism ``auto`` gives this real field at its resolved share."""
    return _assess(spec, share)[0]


def real_regrets(spec: RealField, share: Guarantee) -> dict[str, float]:
    """Each candidate's largest ratio to the best over every data spread (the criterion)."""
    return _assess(spec, share)[1]


def resolve_auto_real(spec: RealField, share: Guarantee) -> RealField:
    """The spec with ``mechanism: auto`` replaced by the chosen mechanism."""
    chosen = auto_real_choice(spec, share).mechanism
    # no re-validation: the calibration (tight by default) stays for laplace's release id
    return spec.model_copy(update={"mechanism": chosen})


def explain_auto_real(
    spec: RealField, share: Guarantee, warn_ratio: float, planned: Mechanism | None = None
) -> dict[str, Any]:
    """``explain``'s ``auto`` entry of a real field (same shape as the categorical one).

    ``planned``: the field's mechanism in the plan, reused if it is one of the candidates.
    """
    choice, regret = _assess(spec, share, planned)
    declared = regret.get(spec.mechanism)  # gaussian is not compared
    best = regret[choice.mechanism]
    warning = None
    if declared is not None and declared > warn_ratio * best:
        warning = (
            f"{spec.name}: {spec.mechanism} has up to {declared / best:.3g}x the variance of "
            f"the mean of {choice.mechanism} (what mechanism: auto picks), over every data "
            "spread; drop mechanism: to use it"
        )
    return {
        "auto": {
            "declared": spec.mechanism,
            "chosen": choice.mechanism,
            "criterion": "worst-case variance of the mean",
            "candidate_regrets": regret,
            "variances_n": choice.n,
            "candidate_variances": choice.variances,
            "restricted": choice.restricted,
        },
        "auto_warning": warning,
    }
