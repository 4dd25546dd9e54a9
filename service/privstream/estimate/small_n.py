"""Warnings for estimates that say little: shares outside [0, 1], intervals wider than the domain.

Debiased estimates are unbiased, not clipped: at small n the noise is larger
than anything it hides, and a share comes out as 6.32 or -1.54 with an
interval that covers every possible share. Both are correct statements
about the noise and useless about the data, so the report says so plainly
instead of leaving the analyst to notice: one warning per field and cause,
naming the worst case, n and the way out. The rule looks only at the
report's own numbers (estimates, intervals, bounds), never at anything the
records did not release.
"""

from __future__ import annotations

from typing import Any

UNIT = (0.0, 1.0)


def _width(ci: list[Any]) -> float:
    low, high = ci
    return float("inf") if low is None or high is None else float(high - low)


def _frequency_warnings(entry: dict[str, Any]) -> list[str]:
    rows = entry.get("frequencies") or []
    n, lines = entry["records"], []
    outside = [r for r in rows if not UNIT[0] <= r["estimate"] <= UNIT[1]]
    if outside:
        worst = max(outside, key=lambda r: abs(r["estimate"] - 0.5))
        lines.append(
            f"{len(outside)} of {len(rows)} shares lie outside [0, 1] at n = {n:,} (e.g. "
            f"{worst['value']!r}: {worst['estimate']:.4g}, stderr {worst['stderr']:.3g}): "
            "debiased shares are unbiased, not clipped; there the noise outweighs the share "
            "(more records narrow it; --consistent gives shares in [0, 1], biased)"
        )
    wide = [r for r in rows if _width(r["ci"]) > UNIT[1] - UNIT[0]]
    if wide:
        worst = max(wide, key=lambda r: _width(r["ci"]))
        lines.append(
            f"{len(wide)} of {len(rows)} intervals are wider than [0, 1], every possible "
            f"share, at n = {n:,} (e.g. {worst['value']!r}: width {_width(worst['ci']):.3g}): "
            "they say nothing about the shares; more records, or a larger epsilon, are needed"
        )
    return lines


def _mean_warnings(entry: dict[str, Any]) -> list[str]:
    mean, bounds = entry.get("mean"), entry.get("bounds")
    if mean is None or bounds is None:
        return []
    n, (lower, upper), lines = entry["records"], bounds, []
    if not lower <= mean["estimate"] <= upper:
        lines.append(
            f"the mean {mean['estimate']:.6g} lies outside the bounds [{lower:g}, {upper:g}] "
            f"at n = {n:,} (stderr {mean['stderr']:.3g}): the noise outweighs the mean"
        )
    width = _width(mean["ci"])
    if width > upper - lower:
        lines.append(
            f"the mean's interval (width {width:.6g}) is wider than the bounds [{lower:g}, "
            f"{upper:g}] at n = {n:,}: it says nothing about the mean; more records, or a "
            "larger epsilon, are needed"
        )
    return lines


def range_warnings(entry: dict[str, Any]) -> list[str]:
    """The warnings of one field's report entry (empty when its estimates are in range)."""
    if not entry.get("records"):
        return []
    return _frequency_warnings(entry) + _mean_warnings(entry)
