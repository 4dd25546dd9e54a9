"""From the config's ``aggregates:`` to plans: the reader, the bounds and the calibrated query.

The unit an aggregate protects has ``L`` records (``sensitivity``): a
subject's ``records_per_group * min(groups_per_subject, cells)``,
``privacy.group_size``, or 1. Counts move a cell by 1 per record; a sum by ``K = max |round((b -
c)/g)|`` grid steps over its bounds ``b`` (``c`` the centre: 0 for a sum, the
midpoint for a mean), ``g`` a power of two about ``2^-10`` of the noise
scale (``privstream.mechanisms.grid.granularity``). A mean spends half its
epsilon and delta on each of its two totals; a density half its epsilon and
all its delta on its kernel sums, half its epsilon on its count.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson

from privstream.aggregates.columnar import ColumnAccumulator, UnitIds
from privstream.aggregates.density import DensityPart
from privstream.aggregates.event_time import KAFKA_TIME, FieldTime
from privstream.aggregates.partial import Accumulator, Bounds
from privstream.aggregates.queries import Query
from privstream.aggregates.read import MAX_KEY_CHARS, Cell, RecordReader
from privstream.aggregates.selection import threshold
from privstream.aggregates.sensitivity import Sensitivity
from privstream.aggregates.totals import NoisyTotal
from privstream.aggregates.windows import CHUNK_BYTES, PARTIAL_OVERHEAD, cell_budget
from privstream.config import AppConfig, FieldConfig
from privstream.config.aggregates import AggregateConfig, declared_keys
from privstream.config.fields import DomainValue
from privstream.errors import MechanismError
from privstream.mechanisms.grid import MAX_GRID_INDEX, granularity

#: stream settings left out of a file-mode release id when unset (ids stay as they were)
_UNSET_STREAM = frozenset({"window", "output_topic"})


@dataclass(frozen=True)
class AggregatePlan:
    """One aggregate, ready to accumulate and release."""

    spec: AggregateConfig
    query: Query
    reader: RecordReader
    bounds: Bounds
    #: every cell released per window, in release order
    cells: tuple[Cell, ...]
    #: the records of one unit (``L``)
    unit_records: int
    #: ``select_groups``: the least noisy count a group is released with (``selection``)
    threshold: int | None = None
    #: ``window.time``: each record's event time from its own field (None: the Kafka timestamp)
    time: FieldTime | None = None
    #: the bytes of cells one committed partial record holds at most (``cell_budget``)
    cell_budget: int = CHUNK_BYTES

    @property
    def cell_bytes(self) -> int:
        """The longest cell entry of a partial record (``encode_partial``): each key's
        longest JSON (a ``select_groups`` key: ``MAX_KEY_CHARS`` characters, each escaped
        to at most 6 bytes), a density index and the integer total, with their brackets."""
        keys = sum(_key_bytes(k) + 1 for k in self.reader.cell_keys)
        return keys + _INDEX_BYTES + _TOTAL_BYTES + 8

    @property
    def row_bytes(self) -> int:
        """The largest released row's Kafka record: the group's longest JSON twice (the
        message key ``{aggregate, window, group}`` and the value repeat it), the name and
        window label twice, the bounds, and ``_TOTAL_BYTES`` per number, with framing."""
        group = 2 + sum(
            len(orjson.dumps(f)) + 2 + _key_bytes(k)
            for f, k in zip(self.reader.cell_fields, self.reader.cell_keys, strict=True)
        )
        if self.query.density is not None:  # the group is the grid point
            group += len(orjson.dumps(self.spec.field)) + 2 + _TOTAL_BYTES
        size = None if self.spec.window is None else self.spec.window.size_seconds
        label = 30 + (20 if size is None else len(str(size)))  # 9999-...Z/<size>s, quoted
        named = len(orjson.dumps(self.name)) + label + group + len(_ROW_NAMES)
        numbers = 4 * _TOTAL_BYTES + len(orjson.dumps([self.epsilon, self.delta]))
        return 2 * named + numbers + len(orjson.dumps(self.released_bounds)) + _ROW_FRAMING

    @property
    def least_message_bytes(self) -> int:
        """The least ``kafka.max_message_bytes`` ``run`` accepts: one cell's partial record
        and one released row fit it."""
        return max(self.cell_bytes + PARTIAL_OVERHEAD, self.row_bytes)

    @property
    def released_bounds(self) -> dict[str, Any]:
        """A row's ``bounds``: the value bounds and the contribution bounds it holds to."""
        spec = self.spec
        out: dict[str, Any] = {"value": None if spec.bounds is None else list(spec.bounds)}
        if spec.contribution is not None:
            out.update(spec.contribution.model_dump())
        if spec.correlation is not None:
            out["max_group"] = spec.correlation.max_group
        out["unit_records"] = self.unit_records
        return out

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def epsilon(self) -> float:
        return self.query.epsilon

    @property
    def delta(self) -> float:
        """The query's realised delta, plus the selection's (``select_groups``)."""
        return self.query.delta + (self.spec.delta if self.threshold is not None else 0.0)

    @property
    def time_source(self) -> str:
        """Where its records' instants come from (``FieldTime.source``, or the Kafka
        timestamp): the windows, ``released`` ends and starts of two names compare only
        under one source (docs/proofs/aggregates.md, step 16)."""
        return KAFKA_TIME if self.time is None else self.time.source

    def accumulator(self, window: str) -> Accumulator:
        return Accumulator(self.name, window, self.reader, self.bounds)

    def batch_accumulator(self, window: str, subjects: UnitIds | None = None) -> ColumnAccumulator:
        """The same sums a batch at a time (``columnar``: file mode); ``subjects``: the ids
        shared by the window's accumulators."""
        return ColumnAccumulator(self.name, window, self.reader, self.bounds, subjects)

    def cell_ids(self, cells: Sequence[Cell] | None = None) -> list[bytes]:
        """Each cell's canonical bytes (``plan.cells`` by default): what its noise is keyed to."""
        fields = self.reader.cell_fields
        chosen = self.cells if cells is None else cells
        return [orjson.dumps(dict(zip(fields, cell, strict=True))) for cell in chosen]

    @cached_property
    def partial_id(self) -> str:
        """What a window's partials are made under: a hash of every part's release id (the
        bounds, clamp range, grid and window with them). A partial of another plan is never
        merged into this plan's release (``privstream.aggregates.stream.releases``)."""
        parts = [t.part for t in self.query.totals]
        if self.query.density is not None:
            parts.append("density")
        ids = b"".join(self.release_id(part) for part in parts)
        return hashlib.sha256(ids).hexdigest()[:32]

    def _declared_keys(self) -> list[list[str] | None]:
        """Each cell field's declared keys as sorted JSON texts (None: any, ``select_groups``)."""
        return [
            None if keys is None else sorted(orjson.dumps(key).decode() for key in keys)
            for keys in self.reader.cell_keys
        ]

    def release_id(self, part: str) -> bytes:
        """A hash of everything that determines the release of one part (the window and
        grace too: another grace is another set of records, never the same noise)."""
        unset: dict[str, Any] = {
            name: True for name in _UNSET_STREAM if getattr(self.spec, name) is None
        }
        if self.spec.window is not None and self.spec.window.time is None:
            unset["window"] = {"time"}  # Kafka timestamps: the ids stay as they were
        density = self.query.density
        if part == "density" and density is not None:
            scale, step = density.sigma, density.step
        else:
            total = self.query.total(part)
            scale, step = total.noise.t, total.step
        payload = {
            "aggregate": self.spec.model_dump(mode="json", exclude=unset),
            "part": part,
            "t": scale.hex(),
            "step": step.hex(),
            "cells": len(self.cells),
            # the bins and keys: a field's domain lives outside the spec, and an edited one
            # of the same size is another plan, never merged with the old one's partials
            "keys": self._declared_keys(),
            # what bounds the unit's records: another subject keeps other records
            "subject": self.reader.subject,
            "correlated_by": self.reader.correlated_by,
            "unit_records": self.unit_records,
        }
        if self.time is not None:  # how the field is parsed moves every record's window
            payload["time"] = self.time.source  # (absent without window.time: ids kept)
        canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).digest()


def unit_records(spec: AggregateConfig, group_size: int, cells: int | None) -> int:
    """``L``: how many records one protected unit can put into the aggregate.

    A subject reaches at most ``min(groups_per_subject, cells)`` cells (``cells``
    None: not known in advance, ``select_groups``).
    """
    bounds = spec.contribution
    if bounds is not None:
        reach = (
            bounds.groups_per_subject if cells is None else min(bounds.groups_per_subject, cells)
        )
        return bounds.records_per_group * reach
    return group_size


def unit_reach(spec: AggregateConfig, records: int) -> tuple[int, int]:
    """``(G, c)``: the cells one unit reaches at most, and its records in one of them."""
    bounds = spec.contribution
    if bounds is not None:
        return bounds.groups_per_subject, bounds.records_per_group
    return records, records


def _cells(
    spec: AggregateConfig, fields: Mapping[str, FieldConfig]
) -> tuple[list[str], list[tuple[DomainValue, ...] | None]]:
    """The cell fields (group-by fields, then the histogram field) and their keys."""
    names = [g.field for g in spec.group_by]
    keys = [declared_keys(g, fields) for g in spec.group_by]
    if spec.query == "histogram" and spec.field is not None:
        names.append(spec.field)
        keys.append(getattr(fields[spec.field], "domain", None) or ())
    return names, keys


def _sensitivity(spec: AggregateConfig, records: int, per_record: int, swap: bool) -> Sensitivity:
    corr = spec.correlation
    if corr is None:
        return Sensitivity(records, per_record)
    return Sensitivity(records, per_record, corr.degree, corr.max_group, swap)


def _grid(spec: AggregateConfig, records: int, epsilon: float, center: float) -> tuple[float, int]:
    """The sum's grid step ``g`` and per-record sensitivity ``K`` in steps."""
    lo, hi = spec.bounds or (0.0, 0.0)
    magnitude = max(abs(lo - center), abs(hi - center))
    factor = _sensitivity(spec, records, 1, swap=True).used
    step = granularity(factor * magnitude / epsilon, max(abs(lo), abs(hi)), hi - lo)
    steps = max(abs(round((lo - center) / step)), abs(round((hi - center) / step)))
    if steps < 1 or steps * records * 4 > MAX_GRID_INDEX:
        raise MechanismError(
            f"aggregate {spec.name!r}: bounds [{lo:g}, {hi:g}] give {steps} grid steps of "
            f"{step:g}; shift the bounds towards 0 or widen them"
        )
    return step, steps


def _query(spec: AggregateConfig, records: int, cells: int) -> Query:
    eps, delta = spec.epsilon, spec.delta
    many = cells > 1
    if spec.query in ("count", "histogram"):
        count = NoisyTotal.build("count", eps, delta, _sensitivity(spec, records, 1, many), cells)
        return Query(spec.query, (count,))
    lo, hi = spec.bounds or (0.0, 0.0)
    if spec.query == "sum":
        step, steps = _grid(spec, records, eps, 0.0)
        sens = _sensitivity(spec, records, steps, swap=True)
        total = NoisyTotal.build("sum", eps, delta, sens, cells, step)
        return Query("sum", (total,), (lo, hi))
    if spec.query == "density":
        count = NoisyTotal.build("count", eps / 2.0, 0.0, Sensitivity(records, 1), cells)
        grid, bandwidth = spec.grid or (), spec.bandwidth or 1.0
        density = DensityPart.build(eps / 2.0, delta, records, grid, bandwidth, (lo, hi))
        return Query("density", (count,), (lo, hi), density=density)
    center = lo / 2.0 + hi / 2.0
    step, steps = _grid(spec, records, eps / 2.0, center)
    sens = _sensitivity(spec, records, steps, swap=True)
    total = NoisyTotal.build("sum", eps / 2.0, delta / 2.0, sens, cells, step)
    count_sens = _sensitivity(spec, records, 1, many)
    count = NoisyTotal.build("count", eps / 2.0, delta / 2.0, count_sens, cells)
    return Query("mean", (total, count), (lo, hi), center)


def _selection(spec: AggregateConfig, records: int) -> tuple[Query, int]:
    """The query of a ``select_groups`` aggregate (pure totals, slack for the ``G`` cells
    a unit reaches) and its threshold (all of delta)."""
    reach, per_group = unit_reach(spec, records)
    pure = spec.model_copy(update={"delta": 0.0})
    query = _query(pure, records, reach)
    count = query.total("count")
    tau = threshold(count.noise, spec.epsilon, spec.delta, reach, per_group)
    return query, tau


def _plan(spec: AggregateConfig, config: AppConfig) -> AggregatePlan:
    fields = {f.name: f for f in config.fields}
    names, keys = _cells(spec, fields)
    selected = spec.select_groups
    cells = () if selected else tuple(itertools.product(*(k or () for k in keys)))
    records = unit_records(spec, config.privacy.group_size, None if selected else len(cells))
    tau = None
    try:
        if selected:
            query, tau = _selection(spec, records)
        else:
            query = _query(spec, records, len(cells))
    except MechanismError as exc:
        named = str(exc).removeprefix(f"aggregate {spec.name!r}: ")
        raise MechanismError(f"aggregates: aggregate {spec.name!r}: {named}") from None
    sum_part = next((t for t in query.totals if t.part == "sum"), None)
    density = query.density
    reader = RecordReader(
        cell_fields=tuple(names),
        cell_keys=tuple(None if k is None else frozenset(k) for k in keys),
        value_field=spec.field if sum_part is not None or density is not None else None,
        bounds=query.bounds or (0.0, 0.0),
        center=query.center,
        step=1.0 if sum_part is None else sum_part.step,
        subject=config.privacy.subject,
        correlated_by=None if spec.correlation is None else spec.correlation.by,
        vector=None if density is None else density.whitened,
    )
    contribution, corr = spec.contribution, spec.correlation
    bounds = Bounds(
        groups_per_subject=None if contribution is None else contribution.groups_per_subject,
        records_per_group=None if contribution is None else contribution.records_per_group,
        max_group=None if corr is None else corr.max_group,
    )
    time = FieldTime.of(None if spec.window is None else spec.window.time, fields)
    budget = CHUNK_BYTES if config.kafka is None else cell_budget(config.kafka.max_message_bytes)
    return AggregatePlan(spec, query, reader, bounds, cells, records, tau, time, budget)


#: a density cell's vector index, and a window's integer total (far past 2**64), in JSON
_INDEX_BYTES, _TOTAL_BYTES = 20, 64
#: a row's field names and punctuation, key and value (``release._row``), at most
_ROW_NAMES = (
    b'{"aggregate":,"window":,"group":,'
    b'"value":,"std_error":,"ci95":[,],"epsilon":,"delta":,"bounds":}'
)
#: Kafka's batch and record framing of one row (a 61-byte batch header and varints)
_ROW_FRAMING = 128


def _key_bytes(keys: frozenset[DomainValue] | None) -> int:
    if keys is None:  # select_groups: any key up to MAX_KEY_CHARS
        return 6 * MAX_KEY_CHARS + 2
    return max((len(orjson.dumps(k)) for k in keys), default=2)


def record_problems(plans: Sequence[AggregatePlan], max_message_bytes: int) -> list[str]:
    """Why ``run`` cannot write these aggregates' records under the producer's record limit
    (empty: it can): one cell's partial record and one released row must fit it (a close
    or release that cannot would be retried forever)."""
    return [
        f"aggregates ({plan.name}): its records take up to {plan.least_message_bytes} bytes "
        f"(one cell's partial record: {plan.cell_bytes + PARTIAL_OVERHEAD}; one released "
        f"row: {plan.row_bytes}), more than kafka.max_message_bytes={max_message_bytes}: "
        f"raise kafka.max_message_bytes to at least {plan.least_message_bytes} (and the "
        "broker's message.max.bytes with it), or declare shorter keys"
        for plan in plans
        if plan.least_message_bytes > max_message_bytes
    ]


def build_aggregates(config: AppConfig) -> tuple[AggregatePlan, ...]:
    """Every aggregate's plan; MechanismError names an aggregate no noise can serve."""
    return tuple(_plan(spec, config) for spec in config.aggregates)
