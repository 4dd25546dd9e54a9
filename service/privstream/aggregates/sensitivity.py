"""How far one unit can move an aggregate: independent, naive and correlated sensitivity.

A *unit* is what the aggregate's epsilon protects: a subject's records
within its contribution bounds (``records_per_group`` in each of at most
``min(groups_per_subject, cells)`` cells), up to ``privacy.group_size``
records, or one record. Removing or
adding a unit moves each of its records' cells by at most the per-record
sensitivity ``Delta`` (1 for a count, ``K`` grid steps for a sum), so the
L1 change over all cells is at most ``L Delta`` with ``L`` the unit's
records: the *independent* sensitivity.

Correlated records (Zhu et al. 2015): records sharing a value of
``correlation.by`` have degree ``delta_0``, and each value keeps at most ``m``
records. Record ``i``'s record sensitivity is ``CS_i = sum_j |delta_ij|
Delta``: itself (1) and its at most ``m - 1`` peers (``delta_0`` each), so
``CS = (1 + delta_0 (m - 1)) Delta``. The cap keeps the *first* ``m``
records of a value: removing one lets the ``(m+1)``-th in, one more record
whose full ``Delta`` counts unless the aggregate is a single count (the
swap then leaves it unchanged): ``+ Delta`` (``swap``). The *naive*
sensitivity moves the whole group, ``m Delta``; the one used is the smaller
of the two, so it never exceeds the naive one (Zhu et al.'s Lemma 1).
Proof: docs/proofs/aggregates.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sensitivity:
    """The L1 sensitivity of one noisy total, in its own integer units."""

    #: records of one unit that can enter the total (``L``)
    records: int
    #: ``Delta``: how far one record moves its cell
    per_record: int
    #: correlation degree ``delta_0``, or None for independent records
    degree: float | None = None
    #: records per correlated group at most (``m``; 1 without correlation)
    max_group: int = 1
    #: the cap's swap moves the total (``sensitivity`` module docstring)
    swap: bool = False

    @property
    def independent(self) -> float:
        """``L Delta``: records taken as independent."""
        return float(self.records * self.per_record)

    @property
    def naive(self) -> float:
        """``L m Delta``: global sensitivity times the group size."""
        return float(self.records * self.max_group * self.per_record)

    @property
    def correlated(self) -> float:
        """``min(naive, L (1 + delta_0 (m - 1) + swap) Delta)``; independent without degree."""
        if self.degree is None:
            return self.independent
        factor = 1.0 + self.degree * (self.max_group - 1) + (1.0 if self.swap else 0.0)
        return min(self.naive, self.records * factor * self.per_record)

    @property
    def used(self) -> float:
        """The sensitivity the noise is calibrated to."""
        return self.correlated

    @property
    def integer_shift(self) -> bool:
        """Whether the calibrated shift is a whole number of units (no correlation)."""
        return self.degree is None
