"""Red team: configs the loader accepts must never end in a traceback.

Bounds of a real field narrower than about ``1e-154`` (accepted: finite, not
reversed): ``LaplaceMechanism.variance_law`` squares the half-width, which
underflows to 0.0, and divides by it (``ZeroDivisionError``) in ``explain``,
``sanitize`` and ``run`` (the declared-mechanism warnings, ``auto``'s choice).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from privstream.cli.main import main

CONFIG = """\
kafka: {{input_topic: raw, output_topic: clean, dead_letter_topic: dlq}}
privacy: {{epsilon: 10, delta: 1e-6}}
fields:
  - {{name: x, kind: real, bounds: [0, {upper}], epsilon: 5, mechanism: {mechanism}}}
"""


@pytest.mark.parametrize("mechanism", ["laplace", "auto"])
@pytest.mark.parametrize("upper", ["1e-300", "1e-160", "5e-324"])
def test_tiny_bounds_are_explained_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mechanism: str, upper: str
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG.format(upper=upper, mechanism=mechanism))
    try:
        code = main(["explain", "--config", str(config)])
    except SystemExit as exit_:  # a config error is fine: exit 2 with a message
        code = exit_.code
    assert code in (0, 2), capsys.readouterr().err


FULL = """\
kafka: {{input_topic: raw, output_topic: clean, dead_letter_topic: dlq}}
privacy: {{epsilon: 10, delta: 1e-6}}
fields:
  - {field}
"""


@pytest.mark.parametrize(
    "field",
    [
        # auto's choice builds randomized response, whose MechanismError escaped build_plan
        "{name: c, kind: categorical, domain: [0, 1], epsilon: 1e-300, mechanism: auto}",
        # grid.granularity: log2(magnitude / 2**50) of a subnormal magnitude: math domain error
        "{name: f, kind: functional, grid: [0, 1], bandwidth: 0.2, rkhs_radius: 5e-324, "
        "epsilon: 1e-300, delta: 1e-06}",
        # grid.granularity: log2(diameter / 2) of the least subnormal diameter (half is 0)
        "{name: r, kind: real, bounds: [0, 5e-324], epsilon: 1e-12, mechanism: piecewise}",
    ],
)
def test_extreme_parameters_are_a_config_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(FULL.format(field=field))
    try:
        code = main(["explain", "--config", str(config)])
    except SystemExit as exit_:
        code = exit_.code
    assert code in (0, 2), capsys.readouterr().err


def test_a_vector_at_a_huge_epsilon_is_a_config_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """smallest_sigma halves sigma until ``2 s s`` underflows: ZeroDivisionError."""
    config = tmp_path / "c.yaml"
    config.write_text(
        "kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}\n"
        "privacy: {epsilon: 1e300, delta: 0.6}\n"
        "fields:\n"
        "  - {name: v, kind: vector, dimension: 2, l2_bound: 1e300, epsilon: 1e300, "
        "delta: 0.5}\n"
    )
    try:
        code = main(["explain", "--config", str(config)])
    except SystemExit as exit_:
        code = exit_.code
    assert code in (0, 2), capsys.readouterr().err
