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
import math
from typing import Any, Literal

from privstream.config import Guarantee
from privstream.config.fields import RealField
from privstream.errors import MechanismError, RegistryError
from privstream.kinds.auto import AutoChoice
from privstream.mechanisms.base import Mechanism
from privstream.mechanisms.hybrid import HybridMechanism
from privstream.mechanisms.laplace import LaplaceMechanism
from privstream.mechanisms.piecewise import PiecewiseMechanism
from privstream.mechanisms.selection import VARIANCE_N

#: candidates in tie-break order
CANDIDATES = ("laplace", "piecewise", "hybrid")


def _candidate(name: str, spec: RealField, share: Guarantee) -> Mechanism:
    bounds = (float(spec.bounds[0]), float(spec.bounds[1]))
    if name == "laplace":
        calibration: Literal["tight", "thesis"] = (
            "thesis" if spec.calibration == "thesis" else "tight"
        )
        return LaplaceMechanism(
            bounds=bounds, epsilon=share.epsilon, delta=share.delta, calibration=calibration
        )
    local = PiecewiseMechanism if name == "piecewise" else HybridMechanism
    return local(bounds=bounds, epsilon=share.epsilon, delta=share.delta)


def _candidates(spec: RealField, share: Guarantee) -> dict[str, Mechanism]:
    """Each candidate that runs at this share (an epsilon too small for 64-bit thresholds not)."""
    built: dict[str, Mechanism] = {}
    for name in CANDIDATES:
        with contextlib.suppress(MechanismError):
            built[name] = _candidate(name, spec, share)
    return built


def _law(mechanism: Mechanism) -> tuple[float, float]:
    """``(s, c)``: ``Var[y | t] = s t^2 + c`` in ``t`` units (Laplace's noise is flat)."""
    if isinstance(mechanism, PiecewiseMechanism | HybridMechanism):
        return mechanism.variance_law()
    if not isinstance(mechanism, LaplaceMechanism):  # pragma: no cover - CANDIDATES are these
        raise RegistryError(f"no variance law for {type(mechanism).__name__}")
    half = (mechanism.upper - mechanism.lower) / 2.0
    return 0.0, (mechanism.estimator_variance(1) / (half * half) if half > 0.0 else 0.0)


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


def _assess(spec: RealField, share: Guarantee) -> tuple[AutoChoice, dict[str, float]]:
    """The choice and each candidate's regret, every candidate built once (each build
    calibrates a sampler)."""
    built = _candidates(spec, share)
    variances = {name: _worst_variance(m, VARIANCE_N) for name, m in built.items()}
    ranked = [name for name in CANDIDATES if name in variances]
    if not ranked:  # pragma: no cover - Laplace runs at every epsilon the config accepts
        return AutoChoice(mechanism="laplace", variances={}, restricted="no candidate"), {}
    regret = regrets({name: _law(m) for name, m in built.items()})
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


def explain_auto_real(spec: RealField, share: Guarantee, warn_ratio: float) -> dict[str, Any]:
    """``explain``'s ``auto`` entry of a real field (same shape as the categorical one)."""
    choice, regret = _assess(spec, share)
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
