"""Red team 13b: Square Wave on bounds narrow relative to their magnitude.

The bounds below pass ``check_bounds`` and construction; the releases are
genuine. ``cells_of`` maps a release back to its cell with an absolute
tolerance of 1e-6 cell widths, finer than the spacing of doubles near ``lo``,
so ``estimate`` calls genuine releases "off the grid" (drops them, and its
warning blames the input), or, where the outputs collapse onto the same
double, assigns them to the wrong cell. Deterministic (no randomness).
"""

from __future__ import annotations

import numpy as np
import pytest
from privstream.errors import MechanismError
from privstream.mechanisms.square_wave import SquareWaveMechanism
from privstream.testing import SeededSource


@pytest.mark.parametrize("bounds", [(1e6, 1e6 + 0.1), (1e9, 1e9 + 100.0)])
def test_every_genuine_release_maps_back_to_its_cell(bounds: tuple[float, float]) -> None:
    mech = SquareWaveMechanism(bounds=bounds, epsilon=1.0)
    cells = mech.cells_of(mech._outputs)
    # today: 1496 (resp. 1516) of the 4096 outputs are "no report of this grid"
    assert np.array_equal(cells, np.arange(mech.grid.cells)), int(np.sum(cells < 0))


def test_releases_of_narrow_bounds_are_not_dropped_by_the_estimator() -> None:
    mech = SquareWaveMechanism(bounds=(1e6, 1e6 + 0.1), epsilon=1.0)
    released = mech.release(np.full(10_000, 1e6 + 0.05), SeededSource(3))
    assert np.all(mech.cells_of(released) >= 0)


def test_bounds_whose_outputs_collapse_are_refused_or_outputs_stay_distinct() -> None:
    """(1e15, 1e15 + 1): 4096 cells give 13 distinct doubles; the estimator's law
    (4096 cells) is then not the law of what is released."""
    try:
        mech = SquareWaveMechanism(bounds=(1e15, 1e15 + 1.0), epsilon=1.0)
    except MechanismError:
        return
    assert len(np.unique(mech._outputs)) == mech.grid.cells
