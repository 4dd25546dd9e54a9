"""A mean-oriented mechanism's per-record variance as a function of its input.

``Var[y | t] = square t^2 + absolute |t| + constant`` for the value ``t``
rescaled to ``[-1, 1]`` (``t`` units). Laplace is flat, PM and PM-SUB grow
with ``t^2``, Duchi's report shrinks with it; Three-Outputs also has an
``|t|`` term (its probability of reporting 0 falls linearly in ``|t|``).
``mechanism: auto`` ranks candidates by it and ``estimate`` builds its
interval from it, so the law is an upper bound, never an estimate.

The variance of the mean of ``n`` reports is ``law.mean(E|t|, E t^2) / n``;
it is linear in the data's distribution of ``|t|``, so the ratio of two
laws over every data spread is largest for data at one value ``|t| = a``
(``at``): a ratio of two linear functionals never exceeds its largest
pointwise ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class VarianceLaw:
    """``Var[y | t] <= square t^2 + absolute |t| + constant`` (``t`` units)."""

    square: float
    constant: float
    absolute: float = 0.0

    def at(self, a: float) -> float:
        """The variance of a report of a value at ``|t| = a``."""
        return self.square * a * a + self.absolute * a + self.constant

    def mean(self, mean_abs: float, mean_square: float) -> float:
        """The mean variance over data with ``E|t| = mean_abs`` and ``E t^2 = mean_square``."""
        return self.square * mean_square + self.absolute * mean_abs + self.constant

    def turning_point(self) -> float | None:
        """The ``a`` in ``(0, 1)`` where ``at`` turns (its vertex), if any."""
        if self.square == 0.0:
            return None
        vertex = -self.absolute / (2.0 * self.square)
        return vertex if 0.0 < vertex < 1.0 else None

    def extremes(self) -> tuple[float, float]:
        """The least and the largest variance over ``|t|`` in ``[0, 1]``."""
        points = [0.0, 1.0]
        if (vertex := self.turning_point()) is not None:
            points.append(vertex)
        values = [self.at(a) for a in points]
        return min(values), max(values)

    def worst(self) -> float:
        """``max_t Var[y | t]``."""
        return self.extremes()[1]


def ratio_turning_points(first: VarianceLaw, second: VarianceLaw) -> list[float]:
    """The ``a`` in ``(0, 1)`` where ``first.at(a) / second.at(a)`` turns.

    ``(f / g)' = 0`` iff ``f' g - f g' = 0``; the cubic terms cancel, leaving
    ``(s1 u2 - u1 s2) a^2 + 2 (s1 c2 - c1 s2) a + (u1 c2 - c1 u2) = 0``.
    Laws without an ``|t|`` term give none: their ratio is monotone in ``t^2``.
    """
    s1, u1, c1 = first.square, first.absolute, first.constant
    s2, u2, c2 = second.square, second.absolute, second.constant
    qa, qb, qc = s1 * u2 - u1 * s2, 2.0 * (s1 * c2 - c1 * s2), u1 * c2 - c1 * u2
    if qa == 0.0:
        roots = [-qc / qb] if qb != 0.0 else []
    else:
        disc = qb * qb - 4.0 * qa * qc
        if disc < 0.0:
            return []
        root = math.sqrt(disc)
        roots = [(-qb - root) / (2.0 * qa), (-qb + root) / (2.0 * qa)]
    return [a for a in roots if 0.0 < a < 1.0]
