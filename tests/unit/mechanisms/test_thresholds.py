"""The exact-threshold lookup in C (``_thresholds.count``) is the count it defines.

Every expected value here comes from the definition, ``#{l : bounds[l] <= w}``
= ``numpy.searchsorted(bounds, w, side="right")``, which knows nothing of the
guide table, the steps or the sentinels. The whole discrete Laplace sampler
is then recomputed from that definition and the documented reading order
(module docstring of ``privstream.mechanisms.discrete_laplace``) and must
match bit for bit. Last, the C function's refusals: every malformed argument
raises before a write, and a corrupt table raises instead of reading past it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from privstream.config import parse_config
from privstream.errors import MechanismError
from privstream.kinds import build_plan
from privstream.mechanisms._thresholds import count
from privstream.mechanisms.discrete_laplace import DiscreteLaplace, GeometricSampler
from privstream.mechanisms.thresholds import MAX_THRESHOLDS, Level
from privstream.testing import SeededSource

from tests.support.configs import config_dict

_TOP = 2**64 - 1
#: the reference config's noised numbers (bench/reference.py): each at epsilon 1
_REFERENCE_FIELDS: list[dict[str, Any]] = [
    {"name": "temp_c", "kind": "real", "mechanism": "laplace", "bounds": [-20.0, 60.0]},
    {"name": "load_pct", "kind": "real", "mechanism": "laplace", "bounds": [0.0, 100.0]},
    {"name": "events", "kind": "integer", "bounds": [0, 100]},
]
#: several peel levels (t = 1e6: two, 1e9: three, 2^40: four), and one-cell heads
_WIDE_SCALES = [1e6, 1e9, 2.0**40]
_SMALL_SCALES = [1e-3, 0.3, 7.3]


def _reference_samplers() -> list[GeometricSampler]:
    fields = [{**field, "epsilon": 1.0} for field in _REFERENCE_FIELDS]
    plan = build_plan(parse_config(config_dict(fields, epsilon=3.0)))
    samplers = [field.handler.mechanism.noise.sampler for field in plan.fields]
    # the tables the issue names: t = 1280, 1600 and 100 (just above, after calibration)
    assert [round(sampler.t) for sampler in samplers] == [1280, 1600, 100]
    return samplers


def _levels() -> list[Level]:
    samplers = _reference_samplers()
    samplers += [GeometricSampler(t) for t in _WIDE_SCALES + _SMALL_SCALES]
    return [level for sampler in samplers for level in sampler.levels]


def _edge_words(bounds: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """Each threshold - 1, itself and + 1 (inside the word range), 0 and 2^64 - 1."""
    values = {0, _TOP}
    for b in bounds.tolist():
        values.update(w for w in (b - 1, b, b + 1) if 0 <= w <= _TOP)
    return np.array(sorted(values), dtype=np.uint64)


def _random_words(seed: int, n: int) -> NDArray[np.uint64]:
    return np.random.default_rng(seed).integers(0, _TOP, size=n, dtype=np.uint64, endpoint=True)


def _searched(bounds: NDArray[np.uint64], words: NDArray[np.uint64]) -> NDArray[np.int64]:
    return np.searchsorted(bounds, words, side="right").astype(np.int64)


@pytest.mark.parametrize("level", _levels(), ids=lambda level: f"{len(level.bounds)}cells")
def test_the_count_is_the_number_of_thresholds_at_or_below_each_word(level: Level) -> None:
    words = np.concatenate([_edge_words(level.bounds), _random_words(len(level.bounds), 200_000)])
    np.testing.assert_array_equal(level.values(words), _searched(level.bounds, words))


def test_the_count_keeps_the_words_shape_and_reads_strided_columns() -> None:
    level = _reference_samplers()[0].levels[0]
    words = _random_words(3, 6 * 1000).reshape(1000, 2, 3)
    column = words[..., 1]  # strided: values copies it to one contiguous run
    assert not column.flags.c_contiguous
    got = level.values(column)
    assert got.shape == (1000, 2)
    np.testing.assert_array_equal(got, _searched(level.bounds, column))
    none = level.values(np.empty((0, 2), dtype=np.uint64))
    assert none.shape == (0, 2)
    assert none.dtype == np.int64


def _edge_tables() -> list[list[int]]:
    """Bounds on and beside bucket starts, at both ends of the word range, repeated,
    crowded into one bucket (many steps), and none at all."""
    start = 1 << 48
    return [
        [],
        [0],
        [_TOP],
        [0, 1, start - 1, start, start + 1, 2 * start, _TOP - start, _TOP - 1, _TOP],
        [start, start, start, 5 * start + 7, 5 * start + 7],
        list(range(7 * start, 7 * start + 40)),  # 40 in one bucket: steps = 40
        sorted(_random_words(5, 30_000).tolist()),
    ]


@pytest.mark.parametrize("bounds", _edge_tables(), ids=lambda bounds: f"{len(bounds)}bounds")
def test_the_count_is_exact_on_edge_tables(bounds: list[int]) -> None:
    level = Level(shift=0, bounds=bounds, xi=0.0)
    table = np.array(bounds, dtype=np.uint64)
    words = np.concatenate([_edge_words(table), _random_words(len(bounds), 20_000)])
    np.testing.assert_array_equal(level.values(words), _searched(table, words))


def test_a_level_refuses_more_thresholds_than_its_guide_counts() -> None:
    Level(shift=0, bounds=list(range(MAX_THRESHOLDS)), xi=0.0)
    with pytest.raises(MechanismError, match="65536 thresholds exceeds the 65535"):
        Level(shift=0, bounds=list(range(MAX_THRESHOLDS + 1)), xi=0.0)


# --- the whole sampler, bit for bit ---------------------------------------------------


def _head_value(sampler: GeometricSampler, words: NDArray[np.uint64]) -> tuple[Any, Any]:
    """One head round from the definition: the count scaled by 2^shift, or the jump
    ``N = 2^S K`` (and "extends") for a word among the top ``T``."""
    head = sampler.levels[-1]
    counted = _searched(head.bounds, words)
    extends = counted == len(head.bounds)
    return np.where(extends, sampler.head_jump, counted << head.shift), extends


def _expected_difference(t: float, seed: int, n: int) -> tuple[NDArray[np.int64], int]:
    """``G1 - G2`` per row, read in the documented order: ``w`` words per geometric
    (digits, then the head), then two words per round of the rows whose heads extend;
    and the number of such rounds."""
    sampler = GeometricSampler(t)
    source = SeededSource(seed)
    width = len(sampler.levels)
    words = source.words(n, 2 * width).reshape(n, 2, width)
    value, extends = _head_value(sampler, words[..., -1])
    for j, level in enumerate(sampler.levels[:-1]):
        value = value + (_searched(level.bounds, words[..., j]) << level.shift)
    start = 2 * width
    while extends.any():
        rows = np.flatnonzero(extends.any(axis=1))
        more, again = _head_value(sampler, source.more_words(rows, start, 2))
        value[rows] += np.where(extends[rows], more, 0)
        extends[rows] &= again
        start += 2
    expected: NDArray[np.int64] = value[:, 0] - value[:, 1]
    return expected, (start - 2 * width) // 2


@pytest.mark.parametrize("t", [100.00000000045476, 1280.000000005821, 1e6, 1e9, 0.3])
def test_the_sampler_output_is_the_definitions_bit_for_bit(t: float) -> None:
    n = 40_000  # a head extends w.p. about e^-4 a round: ~1,400 rows take more words here
    got = DiscreteLaplace(t).sample(SeededSource(11), n)
    expected, rounds = _expected_difference(t, 11, n)
    np.testing.assert_array_equal(got, expected)
    assert (got != 0).any()  # the comparison is not of two zero columns
    assert rounds >= 1  # and it covers the words read for extending heads


# --- refusals -------------------------------------------------------------------------


def _table() -> tuple[NDArray[np.uint64], NDArray[np.uint16], int, int]:
    level = _reference_samplers()[0].levels[0]
    return level.padded, level.guide, level.steps, len(level.bounds)


def _call(**change: Any) -> None:
    padded, guide, steps, size = _table()
    arguments: dict[str, Any] = {
        "words": np.zeros(4, dtype=np.uint64),
        "padded": padded,
        "guide": guide,
        "steps": steps,
        "size": size,
        "out": np.empty(4, dtype=np.int64),
    }
    arguments.update(change)
    count(*arguments.values())


def test_well_formed_arguments_pass() -> None:
    _call()  # the baseline each refusal below changes one thing of


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"words": np.zeros(4, dtype=np.int64)}, "words must hold native uint64"),
        ({"words": np.zeros(4, dtype=np.float64)}, "words must hold native uint64"),
        ({"words": np.zeros(4, dtype=">u8")}, "words must hold native uint64"),
        ({"padded": np.zeros(8, dtype=np.int64)}, "padded must hold native uint64"),
        ({"guide": np.zeros(65536, dtype=np.int32)}, "guide must hold native uint16"),
        ({"guide": np.zeros(65536, dtype=np.int16)}, "guide must hold native uint16"),
        ({"out": np.full(4, 7, dtype=np.uint64)}, "out must hold native int64"),
        ({"out": np.full(4, 7, dtype=np.int32)}, "out must hold native int64"),
        ({"guide": np.zeros(65535, dtype=np.uint16)}, "guide holds 65535 entries"),
        ({"guide": np.zeros(1 << 17, dtype=np.uint16)}, "guide holds 131072 entries"),
        ({"out": np.full(3, 7, dtype=np.int64)}, "out holds 3 items"),
        ({"steps": 0}, "padded holds"),
        ({"steps": -1}, "padded holds"),
        ({"size": -1}, "padded holds"),
        ({"size": 2**62}, "padded holds"),
    ],
)
def test_malformed_arguments_raise_before_any_write(change: dict[str, Any], message: str) -> None:
    change = {"out": np.full(4, 7, dtype=np.int64), **change}
    out = change["out"]
    with pytest.raises(ValueError, match=message):
        _call(**change)
    assert (out == 7).all()  # nothing written


def test_a_short_padded_table_raises() -> None:
    padded, _, steps, size = _table()
    with pytest.raises(ValueError, match="padded holds"):
        _call(padded=padded[:-1])
    with pytest.raises(ValueError, match="padded holds"):
        _call(padded=padded[:size], steps=steps)


@pytest.mark.parametrize(
    "change",
    [
        {"words": np.zeros(8, dtype=np.uint64)[::2]},
        {"guide": np.zeros(2 * 65536, dtype=np.uint16)[::2]},
        {"out": np.empty(8, dtype=np.int64)[::2]},
    ],
)
def test_strided_buffers_are_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not C-contiguous"):  # numpy refuses the export
        _call(**change)


def test_a_read_only_out_is_refused() -> None:
    out = np.empty(4, dtype=np.int64)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        _call(out=out)


@pytest.mark.parametrize("beyond", [1, 2, None])
def test_a_corrupt_guide_entry_raises_instead_of_reading_past_the_table(beyond: int | None) -> None:
    padded, guide, steps, size = _table()
    corrupt = guide.copy()
    # past the thresholds (None: the largest uint16): reads from there would leave padded
    corrupt[0xBEEF] = 65535 if beyond is None else size + beyond
    words = np.array([5, 0xBEEF << 48, 7], dtype=np.uint64)
    with pytest.raises(ValueError, match=rf"guide\[48879\] = {corrupt[0xBEEF]} is outside"):
        count(words, padded, corrupt, steps, size, np.empty(3, dtype=np.int64))
    # the same table serves words whose buckets are intact
    fine = np.array([5, 7], dtype=np.uint64)
    out = np.empty(2, dtype=np.int64)
    count(fine, padded, corrupt, steps, size, out)
    np.testing.assert_array_equal(out, _searched(padded[:size], fine))


def test_non_buffers_are_refused() -> None:
    with pytest.raises(TypeError):
        _call(words=[1, 2, 3, 4])


def test_a_level_holds_python_integer_thresholds_exactly() -> None:
    """Thresholds on both sides of 2^63 stay exact (issue 29: numpy converts such a list to
    float64 unless told the dtype, rounding by up to 2^11): discrete Laplace's levels
    hold the integers its ``Decimal`` arithmetic computed."""
    bounds = [1, 2**62 + 1, 2**63 - 1, 2**63 + 1, 2**64 - 2049, 2**64 - 1]
    level = Level(shift=0, bounds=bounds, xi=1.0)
    assert level.bounds.tolist() == bounds
    words = np.array([2**63, 2**63 + 1, 2**64 - 2050, 2**64 - 2049], dtype=np.uint64)
    assert level.values(words).tolist() == [3, 4, 4, 5]
