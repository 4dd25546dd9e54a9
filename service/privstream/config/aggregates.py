"""The ``aggregates:`` list: noisy counts, histograms, sums and means over a window.

Each aggregate is answered on the raw records in the central model and
released once per window with integer noise (``privstream.aggregates``).
Its epsilon and delta are stated for adding or removing one *unit*: a
subject's bounded records (``privacy.subject`` with ``contribution``), up to
``privacy.group_size`` records, or one record. The per-record budget is
stated for a record whose values change (its presence is public in the
record path), which is a removal and an addition: an aggregate charges
``2 eps`` and ``(1 + e^eps) delta`` against ``privacy.epsilon`` and
``privacy.delta`` (group privacy for two units; docs/aggregates.md).
"""

# no ``from __future__ import annotations``: pydantic would compile every field's
# annotation from its text at start-up (docs/benchmarks.md)
import math
from collections.abc import Mapping, Sequence
from decimal import Context, Decimal
from fractions import Fraction
from typing import Annotated, Literal

import orjson
from pydantic import Field, model_validator

from privstream.config.fields import (
    Bounds,
    Delta,
    DomainValue,
    Epsilon,
    FieldConfig,
    PositiveFloat,
    Strict,
)

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
#: cells (group keys x histogram bins, or grid points) one aggregate may release per window
MAX_CELLS = 100_000
#: how far past its partition's read clock a record's time may be before it is a future
#: record, left out (``privstream.aggregates.windows.MAX_FUTURE_MS``)
MAX_FUTURE_SECONDS = 300
#: windows of one aggregate open at once on one input partition at most: a record opens
#: any window from the grace back to the future limit ahead, each an accumulator
#: (about 1 KB for a count) that every close walks
MAX_OPEN_WINDOWS = 10_000
#: the kinds whose raw value may name a group: not personal, or from a declared domain
GROUP_KINDS = ("public", "categorical")
#: the kinds whose raw value a sum or mean reads
NUMERIC_KINDS = ("real", "integer", "drop", "public")


class GroupBy(Strict):
    """One group-by field and its declared keys (records with another key are left out)."""

    field: str = Field(min_length=1)
    #: the keys released, every one of them every window (default: a categorical's domain)
    keys: tuple[DomainValue, ...] | None = Field(default=None, min_length=1)


class Contribution(Strict):
    """What one subject may contribute to one aggregate per window (the rest is left out)."""

    #: records per (subject, cell): the first ones in input order are kept
    records_per_group: int = Field(ge=1, le=10_000)
    #: cells per subject: the first ones the subject reaches in input order
    groups_per_subject: int = Field(ge=1, le=10_000)


class Correlation(Strict):
    """Records sharing ``by``'s value are correlated with ``degree`` (Zhu et al. 2015)."""

    by: str = Field(min_length=1)
    degree: float = Field(ge=0.0, le=1.0)
    #: records per value of ``by`` at most: the first ones in input order are kept
    max_group: int = Field(ge=1, le=10_000)


class Window(Strict):
    """``privstream run``: the tumbling event-time window (the Kafka timestamp, or ``time``)."""

    size_seconds: int = Field(ge=1, le=366 * 86_400)
    #: how long past a window's end (by the wall clock) its records may still arrive
    grace_seconds: int = Field(default=0, ge=0, le=7 * 86_400)
    #: a ``kind: timestamp`` field (a path: ``device.seen_at``) whose raw time gives the
    #: window instead of the Kafka timestamp; a record without a readable one is left out
    time: str | None = Field(default=None, min_length=1)


class AggregateConfig(Strict):
    """One noisy query answered per window on the raw records."""

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.-]+$")
    query: Literal["count", "histogram", "sum", "mean", "density"]
    #: histogram: a categorical field with a domain; sum, mean, density: a numeric field
    field: str | None = Field(default=None, min_length=1)
    #: sum, mean, density: values are clamped into these bounds
    bounds: Bounds | None = None
    #: density: the points the estimate is released at (1 to 256, increasing)
    grid: tuple[FiniteFloat, ...] | None = Field(default=None, min_length=1, max_length=256)
    #: density: the Gaussian kernel's bandwidth h
    bandwidth: PositiveFloat | None = None
    group_by: tuple[GroupBy, ...] = ()
    epsilon: Epsilon
    delta: Delta = 0.0
    #: required when ``privacy.subject`` is set, refused otherwise
    contribution: Contribution | None = None
    correlation: Correlation | None = None
    #: release only the groups whose noisy count passes a threshold set by delta; a
    #: group-by field may then come without keys (partition selection, docs/aggregates.md)
    select_groups: bool = False
    #: ``privstream run``: the window and the topic its rows go to (file mode: one window)
    window: Window | None = None
    output_topic: str | None = Field(default=None, min_length=1, max_length=249)

    @model_validator(mode="after")
    def _selection_needs(self) -> "AggregateConfig":
        if not self.select_groups:
            return self
        if self.query not in ("count", "histogram", "mean"):
            raise ValueError(
                f"select_groups thresholds a noisy count: query {self.query} has none; "
                "use count, histogram or mean"
            )
        if self.delta <= 0.0:
            raise ValueError(
                "select_groups needs delta > 0: the chance a group seen only "
                "in one unit's records is released"
            )
        if not self.group_by or self.correlation is not None:
            raise ValueError("select_groups needs group_by, and takes no correlation")
        return self

    @model_validator(mode="after")
    def _density_needs(self) -> "AggregateConfig":
        density = self.query == "density"
        if density != (self.grid is not None) or density != (self.bandwidth is not None):
            raise ValueError("grid and bandwidth go with query density, and only with it")
        if not density:
            return self
        if self.grid is not None and list(self.grid) != sorted(set(self.grid)):
            raise ValueError("grid: list the points once each, in increasing order")
        if self.delta <= 0.0:
            raise ValueError("a density is released with Gaussian-process noise: give delta > 0")
        if self.group_by or self.correlation is not None:
            raise ValueError("a density takes no group_by or correlation (not built yet)")
        return self

    @model_validator(mode="after")
    def _query_needs(self) -> "AggregateConfig":
        numeric = self.query in ("sum", "mean", "density")
        if self.query == "count" and self.field is not None:
            raise ValueError("a count counts records: remove field (or use query histogram)")
        if self.query != "count" and self.field is None:
            raise ValueError(f"query {self.query} needs field: the field it reads")
        if numeric and self.bounds is None:
            raise ValueError(f"query {self.query} needs bounds: [lower, upper] its values fit in")
        if not numeric and self.bounds is not None:
            raise ValueError(f"query {self.query} takes no bounds; remove them")
        names = [g.field for g in self.group_by]
        if len(set(names)) != len(names) or self.field in names:
            raise ValueError("group_by names each field once, and not the aggregated field")
        return self


def aggregate_charge(aggregates: Sequence[AggregateConfig]) -> tuple[float, float]:
    """What the aggregates cost against the per-record budget: ``(sum 2 eps, sum (1+e^eps) d)``.

    An aggregate is (eps, delta)-DP for adding or removing one unit; a unit
    whose values change is a removal and an addition, (2 eps, (1 + e^eps)
    delta) by group privacy for two (module docstring).
    """
    eps = math.fsum(2.0 * a.epsilon for a in aggregates)
    delta = math.fsum((1.0 + math.exp(a.epsilon)) * a.delta for a in aggregates)
    return eps, delta


#: digits of ``e^eps`` computed; Decimal's ``exp`` is correctly rounded (half an ulp off)
_EXP_DIGITS = 40
#: a relative bound above that rounding error: 10 ** (1 - _EXP_DIGITS) > half an ulp
_EXP_SLACK = Fraction(1) + Fraction(1, 10 ** (_EXP_DIGITS - 1))


def exact_charge(spec: AggregateConfig) -> tuple[Fraction, Fraction]:
    """One aggregate's ``aggregate_charge`` as upper bounds of its real value, for the
    ledger to round up: ``2 eps`` exactly, ``(1 + e^eps) delta`` with ``e^eps`` bounded
    from above (a double ``exp`` and product may fall below the real cost)."""
    exp = Fraction(Context(prec=_EXP_DIGITS).exp(Decimal(spec.epsilon))) * _EXP_SLACK
    return 2 * Fraction(spec.epsilon), (1 + exp) * Fraction(spec.delta)


def _group_keys(group: GroupBy, spec: FieldConfig | None, selected: bool) -> tuple[str | None, str]:
    """(problem or None, where) for one group-by field (``selected``: keys may be left out)."""
    if spec is None:
        return f"group_by field {group.field!r} is not in fields; declare it there", "group_by"
    if spec.kind not in GROUP_KINDS:
        return (
            f"group_by field {group.field!r} is of kind {spec.kind}: only public or "
            "categorical fields name groups (a noised kind's raw value is personal)",
            "group_by",
        )
    if group.keys is None and getattr(spec, "domain", None) is None and not selected:
        return (
            f"group_by field {group.field!r} has no domain: list its keys, or set "
            "select_groups: true (the keys are then chosen by a noisy threshold)",
            "group_by",
        )
    return None, "group_by"


def declared_keys(
    group: GroupBy, fields: Mapping[str, FieldConfig]
) -> tuple[DomainValue, ...] | None:
    """The keys a group-by may release: its own, else its categorical field's domain; None
    when neither is declared (``select_groups``: any key)."""
    if group.keys is not None:
        return group.keys
    domain: tuple[DomainValue, ...] | None = getattr(fields[group.field], "domain", None)
    return domain


def cell_count(spec: AggregateConfig, fields: Mapping[str, FieldConfig]) -> int:
    """How many cells the aggregate releases per window (every declared key combination)."""
    cells = math.prod(len(declared_keys(g, fields) or ()) for g in spec.group_by)
    if spec.query == "histogram" and spec.field is not None:
        cells *= len(getattr(fields[spec.field], "domain", None) or ())
    return cells * len(spec.grid or (0,))


def _field_problem(spec: AggregateConfig, fields: Mapping[str, FieldConfig]) -> str | None:
    if spec.field is None:
        return None
    target = fields.get(spec.field)
    if target is None:
        return f"field {spec.field!r} is not in fields; declare it there (kind drop keeps it out)"
    if spec.query == "histogram" and (
        target.kind != "categorical" or getattr(target, "domain", None) is None
    ):
        return f"histogram field {spec.field!r} must be categorical with a domain (its bins)"
    if spec.query in ("sum", "mean", "density") and target.kind not in NUMERIC_KINDS:
        return f"{spec.query} field {spec.field!r} is of kind {target.kind}: not a number"
    return None


def _key_problem(spec: AggregateConfig, fields: Mapping[str, FieldConfig]) -> str | None:
    """Why a declared key cannot name a released group (None: every one can). Every release
    and partial writes each cell's keys as JSON: an integer past 64 bits or a string with a
    lone surrogate (both load from a JSON config) cannot be written."""
    named = [(g.field, declared_keys(g, fields) or ()) for g in spec.group_by]
    if spec.query == "histogram" and spec.field is not None:
        named.append((spec.field, getattr(fields[spec.field], "domain", None) or ()))
    for name, keys in named:
        for key in keys:
            try:
                orjson.dumps(key)
            except orjson.JSONEncodeError:
                return (
                    f"key {key!r} of field {name!r} cannot be written as a group's key (JSON "
                    "integers within 64 bits, strings of valid UTF-8): remove it or write "
                    "it as a string"
                )
    return None


def _unit_problem(spec: AggregateConfig, subject: str | None, group_size: int) -> str | None:
    if subject is not None and spec.contribution is None:
        return (
            "privacy.subject is set: give contribution: {records_per_group: 1, "
            "groups_per_subject: 1} (what one subject may add per window)"
        )
    if subject is None and spec.contribution is not None:
        return "contribution bounds a subject's records: set privacy.subject or remove it"
    if spec.correlation is not None and (subject is not None or group_size > 1):
        return (
            "correlation is Zhu et al.'s record-level model: use it without privacy.subject "
            "and with privacy.group_size 1 (a subject's contribution bounds cover the rest)"
        )
    return None


def _time_problem(spec: AggregateConfig, fields: Mapping[str, FieldConfig]) -> str | None:
    """Why ``window.time`` cannot give the windows (None: it can, or it is unset)."""
    name = None if spec.window is None else spec.window.time
    if name is None:
        return None
    target = fields.get(name)
    if target is None:
        return (
            f"window.time {name!r} is not in fields; declare it there as kind: timestamp, "
            "or remove window.time (windows then follow the Kafka timestamp)"
        )
    if target.kind != "timestamp":
        return (
            f"window.time {name!r} is of kind {target.kind}: the window is read from a "
            "time in a declared format; declare it kind: timestamp, or remove window.time "
            "(windows then follow the Kafka timestamp)"
        )
    return None


def _window_problem(spec: AggregateConfig) -> str | None:
    """Why the window lets too many windows be open at once (None: it does not)."""
    if spec.window is None:
        return None
    span = spec.window.grace_seconds + MAX_FUTURE_SECONDS
    size = spec.window.size_seconds
    if math.ceil(span / size) <= MAX_OPEN_WINDOWS:
        return None
    return (
        f"grace_seconds {spec.window.grace_seconds} plus the {MAX_FUTURE_SECONDS} s a "
        f"record's time may be ahead, over size_seconds {size}, let "
        f"{math.ceil(span / size)} windows be open at once per input partition, above the "
        f"limit {MAX_OPEN_WINDOWS} (a producer's times choose which); give size_seconds "
        f"at least {math.ceil(span / MAX_OPEN_WINDOWS)} or a shorter grace_seconds"
    )


def aggregate_problems(
    aggregates: Sequence[AggregateConfig],
    fields: Sequence[FieldConfig],
    subject: str | None,
    group_size: int,
) -> list[tuple[int, str, str]]:
    """(position, setting, message) for every cross-key problem of the aggregates (the
    loader names the aggregate: ``aggregates[0] (name).setting``)."""
    by_name = {f.name: f for f in fields}
    problems: list[tuple[int, str, str]] = []
    names = [a.name for a in aggregates]
    for position, spec in enumerate(aggregates):
        if names.count(spec.name) > 1:
            problems.append((position, "name", "named twice: name each aggregate once"))
        found = [
            (problem, where)
            for problem, where in [
                _group_keys(g, by_name.get(g.field), spec.select_groups) for g in spec.group_by
            ]
            if problem is not None
        ]
        problems += [(position, where, problem) for problem, where in found]
        problem = _field_problem(spec, by_name)
        if problem is not None:
            problems.append((position, "field", problem))
        problem = _unit_problem(spec, subject, group_size)
        if problem is not None:
            problems.append((position, "contribution", problem))
        time_problem = _time_problem(spec, by_name)
        if time_problem is not None:
            problems.append((position, "window", time_problem))
        window_problem = _window_problem(spec)
        if window_problem is not None:
            problems.append((position, "window", window_problem))
        if spec.correlation is not None and spec.correlation.by not in by_name:
            problems.append(
                (position, "correlation", f"correlation.by {spec.correlation.by!r} is not a field")
            )
        checked = not found and problem is None and _field_problem(spec, by_name) is None
        key_problem = _key_problem(spec, by_name) if checked else None
        if key_problem is not None:
            problems.append((position, "group_by", key_problem))
        if checked and not spec.select_groups:
            cells = cell_count(spec, by_name)
            if cells > MAX_CELLS:
                problems.append(
                    (
                        position,
                        "group_by",
                        f"{cells} cells per window, above the limit {MAX_CELLS}; "
                        "declare fewer keys",
                    )
                )
    return problems


def _ledger_problems(aggregates: Sequence[AggregateConfig], ledger_time: str | None) -> list[str]:
    """The per-subject ledger charges contributions placed by Kafka timestamps only
    (docs/proofs/ledger-aggregates.md, Status): the aggregate stream must place each record
    in the same ledger and aggregate windows as the record path did."""
    problems = []
    if ledger_time is not None:
        problems.append(
            f"aggregates: privacy.ledger.time is {ledger_time!r}, but the ledger charges "
            "aggregate contributions by Kafka timestamps only in `run` (the aggregate stream "
            "never sees the released time); remove privacy.ledger.time or the aggregates"
        )
    timed = [(s.name, s.window.time) for s in aggregates if s.window and s.window.time]
    problems += [
        f"aggregates ({name}): window.time is {time!r}, but the per-subject ledger "
        "(privacy.ledger) charges aggregate contributions by Kafka timestamps only in "
        "`run`; remove window.time or privacy.ledger"
        for name, time in timed
    ]
    return problems


def stream_problems(
    aggregates: Sequence[AggregateConfig],
    transactions: bool,
    ledger: bool,
    input_format: str,
    ledger_time: str | None = None,
) -> list[str]:
    """Why ``privstream run`` cannot answer these aggregates over Kafka (empty: it can);
    ``ledger_time``: ``privacy.ledger.time``."""
    problems = []
    if aggregates and input_format != "json":
        problems.append(
            f"aggregates: `run` reads the aggregates' records as JSON, and kafka.format is "
            f"{input_format}: every record would be left out; aggregate a JSON input topic, "
            "or remove the aggregates from this config"
        )
    if aggregates and ledger:
        problems += _ledger_problems(aggregates, ledger_time)
    if aggregates and not transactions:
        problems.append(
            "aggregates: a window is released exactly once through Kafka transactions: "
            "set kafka.transactions: true"
        )
    for spec in aggregates:
        where = f"aggregates ({spec.name})"
        if spec.window is None or spec.output_topic is None:
            problems.append(
                f"{where}: `run` releases an aggregate per window to its own topic: give "
                "window: {size_seconds: 3600} and output_topic: <topic>"
            )
        if spec.correlation is not None:
            problems.append(
                f"{where}: correlation bounds each `by` value in one accumulator, and `run` "
                "has one per input partition; remove correlation (file mode answers it)"
            )
    return problems
