"""Frequency accumulators: categories, hashed categories and sets, with their truths.

Randomized response (categorical and boolean fields) keeps the count of each
released domain value; optimal local hashing keeps the reports for the
candidates' support counts; unary encoding (sets, and categorical fields
with ``mechanism: unary_encoding``) keeps the count of each universe item
or domain value. The estimators are those of the mechanism modules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from privstream.estimate.accumulators import BaseAccumulator, Options, Truth, interval
from privstream.mechanisms import RandomizedResponse
from privstream.mechanisms import randomized_response as rr
from privstream.mechanisms.consistency import project_to_simplex
from privstream.mechanisms.local_hashing import (
    OptimalLocalHashing,
    estimate_frequencies,
    olh_buckets,
)
from privstream.mechanisms.unary_categorical import UnaryCategorical
from privstream.mechanisms.unary_encoding import UnaryEncoding
from privstream.mechanisms.unary_estimation import estimate_item_frequencies_from_counts

_TWO_64 = 2**64


# --- categorical and boolean: randomized response ------------------------------------------


class CategoryTruth:
    def __init__(self, size: int) -> None:
        self.counts = np.zeros(size, dtype=np.int64)

    def add(self, parsed: Sequence[Any], raw: Sequence[Any]) -> None:
        self.counts += np.bincount(np.asarray(parsed, dtype=np.int64), minlength=len(self.counts))


class DomainCounts(BaseAccumulator):
    """Released values of a finite-domain field, counted by domain position.

    ``mechanism`` has a ``domain``; a released value outside it (or of another
    JSON type) is skipped and reported. Subclasses estimate the shares.
    """

    def __init__(self, name: str, kind: str, mechanism: Any) -> None:
        super().__init__(name, kind, mechanism)
        self.mechanism_domain: tuple[Any, ...] = tuple(mechanism.domain)
        self.index = {(type(v), v): i for i, v in enumerate(self.mechanism_domain)}
        self.counts = np.zeros(len(mechanism.domain), dtype=np.int64)

    def add(self, values: Sequence[Any]) -> None:
        found: list[int] = []
        for value in values:
            try:
                position = self.index.get((type(value), value))
            except TypeError:  # an array or object: unhashable
                position = None
            if position is None:
                self._skip(value)
            else:
                found.append(position)
        self.records += len(found)
        if found:
            self.counts += np.bincount(found, minlength=len(self.counts))

    def new_truth(self) -> CategoryTruth:
        return CategoryTruth(len(self.counts))


class CategoryCounts(DomainCounts):
    """Released domain values of a randomized-response field, counted."""

    def __init__(self, name: str, kind: str, mechanism: RandomizedResponse) -> None:
        super().__init__(name, kind, mechanism)
        self.rr = mechanism

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        entry["estimator"] = "randomized response inversion (c/n - p) / (1 - (m+1) p)"
        if self.records == 0:
            entry["frequencies"] = []
            return entry
        estimates, stderr = rr.estimate_frequencies(self.counts, self.rr.epsilon, self.rr.delta)
        entry["frequencies"] = domain_rows(self, estimates, stderr, options, true_share(truth))
        if options.consistent:
            _add_consistent(entry, estimates)
        return entry


def domain_rows(
    counted: DomainCounts,
    estimates: NDArray[np.float64],
    stderr: NDArray[np.float64],
    options: Options,
    shares: NDArray[np.float64] | None,
) -> list[dict[str, Any]]:
    """One row per domain value, in the mechanism's domain order (``shares``: the true ones)."""
    rows = []
    n = counted.records
    for i, value in enumerate(counted.mechanism_domain):
        row: dict[str, Any] = {
            "value": value,
            "estimate": float(estimates[i]),
            "stderr": float(stderr[i]),
            "ci": interval(float(estimates[i]), float(stderr[i]), options.z),
            "count": int(counted.counts[i]),
            "raw_share": float(counted.counts[i] / n),
        }
        if shares is not None:
            row["true"] = float(shares[i])
        rows.append(row)
    return rows


def true_share(truth: Truth | None) -> NDArray[np.float64] | None:
    if isinstance(truth, CategoryTruth) and truth.counts.sum() > 0:
        share: NDArray[np.float64] = truth.counts / truth.counts.sum()
        return share
    return None


class UnaryCategoryCounts(DomainCounts):
    """Released arrays of a categorical OUE field, counted per domain value they hold.

    A release is a JSON array of distinct domain values (any number of them,
    none included); anything else is skipped. ``records`` counts arrays.
    """

    def __init__(self, name: str, kind: str, mechanism: UnaryCategorical) -> None:
        super().__init__(name, kind, mechanism)
        self.unary = mechanism

    def add(self, values: Sequence[Any]) -> None:
        self.records += _count_arrays(values, self._lookup, self.counts, self._skip)

    def _lookup(self, item: object) -> int | None:
        try:
            return self.index.get((type(item), item))
        except TypeError:  # unhashable: an array or object
            return None

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        entry["estimator"] = "unary encoding (optimized) inversion (c/n - q) / (p - q)"
        if self.records == 0:
            entry["frequencies"] = []
            return entry
        estimates, stderr = estimate_item_frequencies_from_counts(
            self.counts, self.records, self.unary.epsilon, max_items=1
        )
        entry["frequencies"] = domain_rows(self, estimates, stderr, options, true_share(truth))
        if options.consistent:
            _add_consistent(entry, estimates)
        return entry


#: the caveat that goes with every consistent vector
CONSISTENT_CAVEAT = (
    "consistent: Norm-Sub projection of the estimates onto the simplex (non-negative, sum 1); "
    "biased, most for rare values (pushed to 0): no standard errors or intervals, use the "
    "unbiased estimate for any one value"
)


def _add_consistent(entry: dict[str, Any], estimates: NDArray[np.float64]) -> None:
    """Each row's ``consistent`` share (rows in the order of ``estimates``), and the caveat."""
    for row, share in zip(entry["frequencies"], project_to_simplex(estimates), strict=True):
        row["consistent"] = float(share)
    entry["notes"].append(CONSISTENT_CAVEAT)


# --- categorical with local hashing ---------------------------------------------------------


class HashedTruth:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.total = 0

    def add(self, parsed: Sequence[Any], raw: Sequence[Any]) -> None:
        self.counts.update(parsed)
        self.total += len(parsed)


class HashedReports(BaseAccumulator):
    """OLH reports ``{"seed": s, "bucket": y}``, kept for the candidates' support counts."""

    def __init__(
        self,
        name: str,
        kind: str,
        mechanism: OptimalLocalHashing,
        domain: tuple[str, ...] | None = None,
    ) -> None:
        super().__init__(name, kind, mechanism)
        self.olh = mechanism
        #: a declared domain (``mechanism: auto``): the default candidates
        self.domain = domain
        self.buckets = olh_buckets(mechanism.epsilon)
        self.seeds: list[NDArray[np.uint64]] = []
        self.reports: list[NDArray[np.uint64]] = []

    def _valid(self, value: object) -> tuple[int, int] | None:
        if not isinstance(value, dict):
            return None
        seed, bucket = value.get("seed"), value.get("bucket")
        if type(seed) is not int or type(bucket) is not int:  # bool is not a report
            return None
        if not (0 <= seed < _TWO_64 and 0 <= bucket < self.buckets):
            return None
        return seed, bucket

    def add(self, values: Sequence[Any]) -> None:
        seeds: list[int] = []
        buckets: list[int] = []
        for value in values:
            report = self._valid(value)
            if report is None:
                self._skip(value)
            else:
                seeds.append(report[0])
                buckets.append(report[1])
        self.records += len(seeds)
        if seeds:
            self.seeds.append(np.array(seeds, dtype=np.uint64))
            self.reports.append(np.array(buckets, dtype=np.uint64))

    def new_truth(self) -> HashedTruth:
        return HashedTruth()

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        entry["estimator"] = "OLH support counts (c/n - 1/g) / (p - 1/g)"
        candidates = options.candidates.get(self.name, self.domain)
        if candidates is None and isinstance(truth, HashedTruth) and truth.counts:
            top = truth.counts.most_common(options.truth_candidates)
            candidates = tuple(value for value, _ in top)
            entry["notes"].append(
                f"no --candidates for {self.name}: the truth's {len(candidates)} most frequent "
                "values are the candidates"
            )
        if not candidates:
            entry["notes"].append(
                f"no candidates: local hashing estimates only the values you name; pass "
                f"--candidates {self.name}=a,b,c"
            )
            entry["frequencies"] = []
            return entry
        if self.records == 0:
            entry["frequencies"] = []
            return entry
        seeds = np.concatenate(self.seeds)
        buckets = np.concatenate(self.reports)
        estimates, stderr = estimate_frequencies(seeds, buckets, candidates, self.olh.epsilon)
        rows = []
        for i, value in enumerate(candidates):
            row: dict[str, Any] = {
                "value": value,
                "estimate": float(estimates[i]),
                "stderr": float(stderr[i]),
                "ci": interval(float(estimates[i]), float(stderr[i]), options.z),
            }
            if isinstance(truth, HashedTruth) and truth.total:
                row["true"] = truth.counts[value] / truth.total
            rows.append(row)
        entry["frequencies"] = rows
        if options.consistent:
            if candidates == self.domain:
                _add_consistent(entry, estimates)
            else:
                entry["notes"].append(
                    "no consistent frequencies: the candidates are not the field's whole domain"
                )
        return entry


# --- sets: unary encoding -------------------------------------------------------------------


class SetTruth:
    def __init__(self, size: int) -> None:
        self.counts = np.zeros(size, dtype=np.int64)
        self.total = 0

    def add(self, parsed: Sequence[Any], raw: Sequence[Any]) -> None:
        for positions in parsed:
            self.counts[positions] += 1
        self.total += len(parsed)


class SetReports(BaseAccumulator):
    """Released sets (the universe items whose noisy bit is 1), counted per item."""

    def __init__(self, name: str, kind: str, mechanism: UnaryEncoding) -> None:
        super().__init__(name, kind, mechanism)
        self.unary = mechanism
        self.position = {item: j for j, item in enumerate(mechanism.universe)}
        self.counts = np.zeros(len(mechanism.universe), dtype=np.int64)

    def add(self, values: Sequence[Any]) -> None:
        self.records += _count_arrays(values, self._lookup, self.counts, self._skip)

    def _lookup(self, item: object) -> int | None:
        return self.position.get(item) if isinstance(item, str) else None

    def new_truth(self) -> SetTruth:
        return SetTruth(len(self.counts))

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        entry["estimator"] = f"unary encoding ({self.unary.variant}) inversion (c/n - q) / (p - q)"
        if self.records == 0:
            entry["frequencies"] = []
            return entry
        estimates, stderr = estimate_item_frequencies_from_counts(
            self.counts,
            self.records,
            self.unary.epsilon,
            max_items=self.unary.max_items,
            variant=self.unary.variant,
        )
        wanted = options.candidates.get(self.name, self.unary.universe)
        rows = []
        for value in wanted:
            j = self.position[value]
            row: dict[str, Any] = {
                "value": value,
                "estimate": float(estimates[j]),
                "stderr": float(stderr[j]),
                "ci": interval(float(estimates[j]), float(stderr[j]), options.z),
                "raw_share": float(self.counts[j] / self.records),
            }
            if isinstance(truth, SetTruth) and truth.total:
                row["true"] = float(truth.counts[j] / truth.total)
            rows.append(row)
        entry["frequencies"] = rows
        return entry


def _distinct_positions(value: object, lookup: Callable[[object], int | None]) -> list[int] | None:
    """The positions of a JSON array of distinct known items; None for anything else."""
    if not isinstance(value, list):
        return None
    positions = []
    for item in value:
        position = lookup(item)
        if position is None:
            return None
        positions.append(position)
    return positions if len(set(positions)) == len(positions) else None


def _count_arrays(
    values: Sequence[Any],
    lookup: Callable[[object], int | None],
    counts: NDArray[np.int64],
    skip: Callable[[object], None],
) -> int:
    """Add each array of distinct known items to ``counts`` (``skip`` the rest); how many
    arrays were counted."""
    counted = 0
    for value in values:
        found = _distinct_positions(value, lookup)
        if found is None:
            skip(value)
            continue
        counts[found] += 1
        counted += 1
    return counted
