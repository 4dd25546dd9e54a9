"""What a query releases per cell, from its noisy totals: the value, its error, its interval.

* ``count`` and ``histogram``: the noisy count ``n + Z``, an integer.
* ``sum``: ``g (S + Z)`` with ``S`` the clamped values on the grid ``g``.
* ``mean``: half the budget each to a noisy *centred* sum ``S' = S + Z_s``
  (values minus the bounds' midpoint ``c``) and a noisy count ``N' = n + Z_n``;
  the mean is ``c + g S' / N'`` clamped into the bounds, never a division by
  the true ``n``. Its 95% interval holds each total in its own 97.5% interval
  (union bound: coverage >= 95%) and takes the extreme ratios over that box;
  when ``N'`` may be below 1 it is the bounds themselves. Its standard error
  is the delta method's at the noisy values.

* ``density``: half the epsilon to the kernel sums on the grid (with all of
  delta, ``density``), half to a noisy count ``N'``; the density is
  ``S' / (max(N', 1) sqrt(2 pi) h)``, kept in ``[0, 1 / (sqrt(2 pi) h)]``
  (``privstream.aggregates.release.density_rows``).

Every query carries its guarantee: its ``NoisyTotal`` parts (sensitivity,
noise scale, expected error, interval half-width) and its epsilon and delta
(the parts' sum). Proof: docs/proofs/aggregates.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from privstream.aggregates.density import DensityPart
from privstream.aggregates.totals import NoisyTotal, half_width
from privstream.errors import MisuseError

#: (value, standard error, 95% interval)
Answer = tuple[float, float, tuple[float, float]]


@dataclass(frozen=True)
class Query:
    """One aggregate's query: its noisy totals and how a cell's answer is read from them."""

    kind: str
    totals: tuple[NoisyTotal, ...]
    bounds: tuple[float, float] | None = None
    #: what the sum part's values are centred on (a mean's midpoint; 0 otherwise)
    center: float = 0.0
    #: a density's kernel sums on its grid (beside its count total)
    density: DensityPart | None = None

    @property
    def epsilon(self) -> float:
        extra = [] if self.density is None else [self.density.epsilon]
        return math.fsum([*(t.epsilon for t in self.totals), *extra])

    @property
    def delta(self) -> float:
        extra = [] if self.density is None else [self.density.mechanism.core.delta_achieved]
        return math.fsum([*(t.realised_delta for t in self.totals), *extra])

    def parts(self) -> list[dict[str, float | int | str]]:
        """Each part's guarantee and error (``NoisyTotal.describe``, ``DensityPart.describe``)."""
        extra = [] if self.density is None else [self.density.describe()]
        return [*(t.describe() for t in self.totals), *extra]

    def total(self, part: str) -> NoisyTotal:
        found = [t for t in self.totals if t.part == part]
        if not found:
            raise MisuseError(f"a {self.kind} query has no {part} total")
        return found[0]

    def answer(self, noisy: dict[str, int]) -> Answer:
        """A cell's released value, standard error and 95% interval from its noisy totals."""
        if self.kind == "mean":
            return self._mean(noisy["sum"], noisy["count"])
        part = self.totals[0]
        if part.part == "count":  # an integer, its interval too
            count, k = noisy["count"], part.half_width
            return count, part.std_error, (count - k, count + k)
        value = noisy[part.part] * part.step
        width = part.half_width * part.step
        return value, part.std_error, (value - width, value + width)

    def _mean(self, noisy_sum: int, noisy_count: int) -> Answer:
        lo, hi = self.bounds or (0.0, 0.0)
        total, count = self.total("sum"), self.total("count")
        g, c = total.step, self.center
        n = max(noisy_count, 1)
        value = min(max(c + g * noisy_sum / n, lo), hi)
        # delta method at the noisy values: Var(S/N) ~ Var S / N^2 + S^2 Var N / N^4
        ratio = g * noisy_sum / n
        # hypot, not a sum of squares: bounds may reach 2**1002, whose square overflows
        std_error = math.hypot(total.std_error / n, ratio * count.std_error / n)
        k_sum = half_width(total.noise, 0.975)
        k_count = half_width(count.noise, 0.975)
        if noisy_count - k_count < 1:
            return value, std_error, (lo, hi)
        ratios = [
            g * s / m
            for s in (noisy_sum - k_sum, noisy_sum + k_sum)
            for m in (noisy_count - k_count, noisy_count + k_count)
        ]
        low = min(max(c + min(ratios), lo), hi)
        high = min(max(c + max(ratios), lo), hi)
        return value, std_error, (low, high)
