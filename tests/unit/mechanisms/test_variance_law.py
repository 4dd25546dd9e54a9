"""``VarianceLaw`` and the exact regret over every data spread (``|t|`` terms included)."""

from __future__ import annotations

import numpy as np
import pytest
from privstream.kinds.auto_real import regrets
from privstream.mechanisms.variance_law import VarianceLaw, ratio_turning_points

LAWS = {
    "flat": VarianceLaw(0.0, 2.0),
    "growing": VarianceLaw(1.2, 0.9),
    "shrinking": VarianceLaw(-1.0, 2.4),
    "three": VarianceLaw(-1.0, 0.5, absolute=1.5),
}


def test_the_regret_is_the_dense_grids_over_data_at_one_value() -> None:
    """Data at one ``|t| = a`` is the worst spread: the exact regret equals a grid's maximum
    (to the grid's second-order error at a smooth peak)."""
    a = np.linspace(0.0, 1.0, 200_001)
    values = {
        name: law.square * a**2 + law.absolute * a + law.constant for name, law in LAWS.items()
    }
    best = np.min(np.stack(list(values.values())), axis=0)
    exact = regrets(LAWS)
    for name, v in values.items():
        assert exact[name] == pytest.approx(float(np.max(v / best)), rel=1e-9)
    # the |t| law's ratio to the flat one turns inside (0, 1): an endpoint-only rule misses it
    (turn,) = ratio_turning_points(LAWS["three"], LAWS["flat"])
    assert 0.0 < turn < 1.0 and turn == pytest.approx(0.75)


def test_extremes_mean_and_worst() -> None:
    law = LAWS["three"]
    assert law.turning_point() == pytest.approx(0.75)
    assert law.extremes() == pytest.approx((0.5, 0.5 + 1.5 * 0.75 - 0.75**2))
    assert law.worst() == law.extremes()[1]
    # uniform t on [-1, 1]: E|t| = 1/2, E t^2 = 1/3
    assert law.mean(0.5, 1.0 / 3.0) == pytest.approx(0.5 + 0.75 - 1.0 / 3.0)
    assert VarianceLaw(1.0, 1.0).turning_point() is None  # vertex at 0: none inside
