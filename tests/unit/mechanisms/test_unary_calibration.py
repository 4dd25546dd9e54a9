"""The unary encoding's false-report threshold: never below the exact one, in any context."""

from __future__ import annotations

from decimal import ROUND_CEILING, Context, Decimal, localcontext

import pytest
from privstream.mechanisms.unary_calibration import symmetric_false_threshold

CS = [1e-9, 0.01, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 44.0, 100.0]


def exact(c: float) -> int:
    """``ceil(2^64 / (1 + e^c))`` from 120 digits (far past where the ceiling could move)."""
    context = Context(prec=120)
    q = context.divide(Decimal(2**64), context.add(Decimal(1), context.exp(Decimal(c))))
    return max(1, int(q.to_integral_value(ROUND_CEILING)))


@pytest.mark.parametrize("c", CS)
def test_the_threshold_is_the_exact_ceiling_or_one_above(c: float) -> None:
    assert exact(c) <= symmetric_false_threshold(c) <= exact(c) + 1


@pytest.mark.parametrize("digits", [3, 10, 28, 200])
def test_the_callers_decimal_context_moves_no_threshold(digits: int) -> None:
    expected = [symmetric_false_threshold(c) for c in CS]
    with localcontext(Context(prec=digits)):
        assert [symmetric_false_threshold(c) for c in CS] == expected
