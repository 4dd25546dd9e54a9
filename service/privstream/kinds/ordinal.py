"""Registration of ordinal categories: ``categorical`` with ``mechanism: exponential``.

The field parses like any categorical (a domain value to its position, in
the *declared* order, which is the order the utility ``-|i - j|`` reads:
it is never sorted, memoized or not), releases through
``OrdinalExponential`` and is estimated by inverting its transition matrix
(``privstream.mechanisms.exponential``).
"""

from __future__ import annotations

from typing import Any

from privstream.audit.targets import FiniteTarget, spread_codes
from privstream.config import Guarantee
from privstream.config.fields import CategoricalField
from privstream.estimate.accumulators import Options, Truth, interval
from privstream.estimate.frequency import CategoryTruth, DomainCounts
from privstream.kinds.base import FieldKind, MemoSupport, calibrated, describe, mechanism_domain
from privstream.mechanisms.exponential import OrdinalExponential, estimate_frequencies
from privstream.pipeline import canary, columns, encode
from privstream.pipeline.handlers import CategoricalHandler


def _ordinal(spec: CategoricalField, share: Guarantee | None) -> CategoricalHandler:
    eps, _ = calibrated("categorical (exponential)", share)
    if spec.domain is None:  # the config model requires it
        raise AssertionError("exponential without a domain")  # pragma: no cover
    return CategoricalHandler(
        spec.name, OrdinalExponential(domain=spec.domain, epsilon=eps), spec.unknown_as
    )


class OrdinalCounts(DomainCounts):
    """Released values of an ordinal field, counted; shares by transition-matrix inversion."""

    def __init__(self, name: str, kind: str, mechanism: OrdinalExponential) -> None:
        super().__init__(name, kind, mechanism)
        self.ordinal = mechanism

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        entry["estimator"] = "transition-matrix inversion (P^T)^-1 c/n"
        n = self.records
        if n == 0:
            entry["frequencies"] = []
            return entry
        true_share = None
        if isinstance(truth, CategoryTruth) and truth.counts.sum() > 0:
            true_share = truth.counts / truth.counts.sum()
        estimates, stderr = estimate_frequencies(self.ordinal, self.counts)
        rows = []
        for i, value in enumerate(self.ordinal.domain):
            row: dict[str, Any] = {
                "value": value,
                "estimate": float(estimates[i]),
                "stderr": float(stderr[i]),
                "ci": interval(float(estimates[i]), float(stderr[i]), options.z),
                "count": int(self.counts[i]),
                "raw_share": float(self.counts[i] / n),
            }
            if true_share is not None:
                row["true"] = float(true_share[i])
            rows.append(row)
        entry["frequencies"] = rows
        return entry


ORDINAL = FieldKind(
    kind="categorical",
    mechanism="exponential",
    model=CategoricalField,
    build=_ordinal,
    column=columns.categorical_column,
    texts=lambda handler, values: encode.domain_texts(handler.mechanism.domain, values),
    memo_style=lambda handler: None if handler.unknown_as is None else "str",
    # the token holds the value; the scope holds the domain in its declared order
    memo=MemoSupport(domain=mechanism_domain),
    estimator=lambda h, kind, options: OrdinalCounts(h.name, kind, h.mechanism),
    # the ends are the worst pair (P(0|0) / P(0|m) is the largest ratio); spread keeps both
    audit_target=lambda h: FiniteTarget(h.name, h.mechanism, spread_codes(len(h.mechanism.domain))),
    explain=describe,
    canary=canary.categorical_inputs,
)

REGISTRATIONS = (ORDINAL,)
