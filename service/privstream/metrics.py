"""Every Prometheus instrument privstream exports, built against one registry.

Labels carry field names, mechanism names, partitions and (when
``metrics.dead_letter_reasons`` is on) reason codes: never a raw value. No
instrument is a function of raw values or of released noise except the
residuals the README names ("Metrics": record and dead-letter counts, batch
timings, reason codes when on); the error metrics come from shadow draws
(``privstream.canary_metrics``) and clamped counts are released with noise
(``privstream.clamped_counts``). Tests pass a fresh ``CollectorRegistry``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from privstream import __version__
from privstream.canary_metrics import CanaryErrors
from privstream.clamped_counts import NoisyClampedCounts
from privstream.config.models import ClampedCountsConfig
from privstream.mechanisms import NoiseSource, OsEntropy
from privstream.pipeline import DeadLetter, RecordPlan
from privstream.pipeline.canary import DEFAULT_COUNT, Canaries
from privstream.pipeline.results import Observation

_BATCH_SIZE_BUCKETS = (1, 10, 50, 100, 250, 500, 1000, 2000, 5000, 10000, 50000)
#: fine below 100 ms, where the produce-to-readable target of a steady stream lies
_STAGE_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1, 2.5, 10)


class Metrics:
    """The service's instruments; per-field guarantee gauges are set from the plan."""

    def __init__(self, registry: CollectorRegistry, *, dead_letter_reasons: bool = False) -> None:
        self.registry = registry
        self.canaries: Canaries | None = None
        self.canary_errors: CanaryErrors | None = None
        self.clamped_counts: NoisyClampedCounts | None = None
        self._canary_source: NoiseSource = OsEntropy()
        self._canary_interval = 0.0
        self._clock: Callable[[], float] = time.monotonic
        self._last_round = -math.inf
        self._reasons = dead_letter_reasons
        #: each aggregate's groups in ``aggregate_value``: the latest window's only
        self._aggregate_groups: dict[str, set[str]] = {}
        self.records_in = Counter(
            "privstream_records_in", "Raw records consumed", registry=registry
        )
        self.records_out = Counter(
            "privstream_records_out", "Sanitized records produced", registry=registry
        )
        self.dead_lettered = Counter(
            "privstream_records_dead_lettered",
            "Records sent to the dead-letter output"
            + (", by reason code" if dead_letter_reasons else ""),
            ["reason"] if dead_letter_reasons else [],
            registry=registry,
        )
        self.batch_seconds = Histogram(
            "privstream_batch_duration_seconds",
            "Wall time from a polled batch to its committed offsets",
            registry=registry,
        )
        self.batch_stage_seconds = Histogram(
            "privstream_batch_stage_duration_seconds",
            "Wall time of one step of a batch: poll (waiting for records, from the call "
            "to the batch), sanitize, queued (for the previous transaction), produce "
            "(begun, sent and acknowledged), commit (the offsets, and the transaction's "
            "commit)",
            ["stage"],
            buckets=_STAGE_BUCKETS,
            registry=registry,
        )
        self.batch_records = Histogram(
            "privstream_batch_size_records",
            "Records per processed batch",
            buckets=_BATCH_SIZE_BUCKETS,
            registry=registry,
        )
        self.broker_connected = Gauge(
            "privstream_broker_connected",
            "1 while the broker answers metadata requests",
            registry=registry,
        )
        self.consumer_lag = Gauge(
            "privstream_consumer_lag_records",
            "Records of an assigned input partition not yet processed (high watermark - position)",
            ["partition"],
            registry=registry,
        )
        self.aggregate_windows = Counter(
            "privstream_aggregate_windows_released",
            "Windows an aggregate released (each once)",
            ["aggregate"],
            registry=registry,
        )
        self.aggregate_window_end = Gauge(
            "privstream_aggregate_window_end_seconds",
            "The end (Unix seconds) of the latest window an aggregate released",
            ["aggregate"],
            registry=registry,
        )
        self.aggregate_value = Gauge(
            "privstream_aggregate_value",
            "The latest released window's noisy value per group (a released value: public)",
            ["aggregate", "group"],
            registry=registry,
        )
        self.transactions = Counter(
            "privstream_transactions",
            "Kafka transactions (one per batch) by outcome: committed or aborted",
            ["outcome"],
            registry=registry,
        )
        self.transactions_expired = Counter(
            "privstream_transactions_expired",
            "Transactions the broker aborted after transaction_timeout_ms during an outage "
            "(the producer was fenced; a new session resumed from the committed offsets)",
            registry=registry,
        )
        self.undecodable_batches = Counter(
            "privstream_undecodable_batches",
            "Failed reads of a record batch the Kafka client cannot decode (corrupt, or a "
            "codec it lacks), one per try; its partition stops before it, never skips it",
            ["topic", "partition"],
            registry=registry,
        )
        self.stale_commits = Counter(
            "privstream_stale_commits_refused",
            "Transactions aborted because the group refused their offsets: the worker had "
            "stalled past session_timeout_ms and its partitions had moved (zombie fencing)",
            registry=registry,
        )
        self.ledger_suppressed = Counter(
            "privstream_ledger_suppressed",
            "Records the subject ledger did not release, by reason (budget_exhausted, "
            "lifetime_exhausted, late_record, future_record, subject_partition_mismatch, "
            "subject_key_mismatch, subject_too_long, no_subject)",
            ["reason"],
            registry=registry,
        )
        self.clock_ahead = Gauge(
            "privstream_clock_ahead_seconds",
            "How far this replica's clock was ahead of the broker's at the last charged batch "
            "(charge time minus the broker's append time of its changelog records; negative "
            "when behind, by at least the produce latency)",
            registry=registry,
        )
        self.clock_refusals = Counter(
            "privstream_clock_refusals",
            "Batches the ledger refused to charge (their transaction aborted) because this "
            "replica's clock was ahead of the broker's by more than privacy.ledger.max_future",
            registry=registry,
        )
        self.ledger_subjects = Gauge(
            "privstream_ledger_subjects",
            "Active (subject, window) pairs and aggregate decisions in the ledger of this "
            "worker's partitions",
            registry=registry,
        )
        self.build_info = Gauge(
            "privstream_build_info",
            "Always 1; labels give the version and the config hash",
            ["version", "config_sha256"],
            registry=registry,
        )
        self.http_metrics_renders = Counter(
            "privstream_http_metrics_renders",
            "Times /metrics rendered the registry (at most 10 a second; scrapes in between "
            "get the same body)",
            registry=registry,
        )
        self.http_scrapes_refused = Counter(
            "privstream_http_scrapes_refused",
            "/metrics scrapes answered 503 (after 5 s): at most 10 are answered a second, "
            "and their turn was more than 5 s away",
            registry=registry,
        )
        self.http_connections_evicted = Counter(
            "privstream_http_connections_evicted",
            "HTTP connections closed unanswered, oldest first, to make room for a new one",
            registry=registry,
        )
        self.field_epsilon = self._field_gauge("privstream_field_epsilon", "Field epsilon")
        self.field_delta = self._field_gauge("privstream_field_delta", "Field delta")
        self.field_expected_error = self._field_gauge(
            "privstream_field_expected_error",
            "Worst-case expected error E[rho(Y, d)] of the field's mechanism",
        )
        self.field_gamma_lower_bound = self._field_gauge(
            "privstream_field_gamma_lower_bound",
            "Lower bound on the worst-case expected error of any (eps, delta)-DP mechanism",
        )

    def _field_gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, ["field", "mechanism"], registry=self.registry)

    def observe_window(
        self, aggregate: str, end_ms: int, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """An aggregate's released window: its rows' noisy values as the latest ones, in
        place of the previous window's (with ``select_groups`` a group released before may
        not be now: its old value is no latest one, and the labels stay bounded)."""
        self.aggregate_windows.labels(aggregate).inc()
        self.aggregate_window_end.labels(aggregate).set(end_ms / 1000)
        groups = set()
        for row in rows:
            group = json.dumps(row["group"], sort_keys=True, separators=(",", ":"))
            self.aggregate_value.labels(aggregate, group).set(float(row["value"]))
            groups.add(group)
        # after the new values are set: a scrape never sees a group kept in between missing
        for group in self._aggregate_groups.get(aggregate, set()) - groups:
            self.aggregate_value.remove(aggregate, group)
        self._aggregate_groups[aggregate] = groups

    def describe_plan(
        self,
        plan: RecordPlan,
        *,
        canaries: int = DEFAULT_COUNT,
        canary_interval_s: float = 1.0,
        clamped_counts: ClampedCountsConfig | None = None,
        canary_source: NoiseSource | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Publish the configuration's guarantees and set up the per-field collectors.

        A round of shadow draws follows a committed batch when at least
        ``canary_interval_s`` passed since the last round (0: after every
        batch): the cost is then bounded per second, not per batch, whatever
        the batch size. ``canary_source`` (tests only: a seeded source)
        replaces the fresh ``OsEntropy`` of the shadow draws.
        """
        self.canaries = Canaries(plan, count=canaries)
        self._canary_interval = canary_interval_s
        self._clock = clock
        self.canary_errors = CanaryErrors(plan, self.canaries.laws)
        self.registry.register(self.canary_errors)
        if canary_source is not None:
            self._canary_source = canary_source
        if clamped_counts is not None:
            self.clamped_counts = NoisyClampedCounts(
                plan, epsilon=clamped_counts.epsilon, window_s=clamped_counts.window_seconds
            )
            self.registry.register(self.clamped_counts)
        self.build_info.labels(__version__, plan.config_sha256).set(1)
        for handler in plan.handlers:
            mech = handler.mechanism
            if mech is None:
                continue
            labels = (handler.name, mech.name)
            self.field_epsilon.labels(*labels).set(mech.epsilon)
            self.field_delta.labels(*labels).set(mech.delta)
            self.field_expected_error.labels(*labels).set(mech.expected_error)
            self.field_gamma_lower_bound.labels(*labels).set(mech.gamma_lower_bound)

    def observe_fields(self, observations: Mapping[str, Observation]) -> None:
        """After a committed batch: a round of shadow draws if one is due, the clamped counts."""
        now = self._clock()
        due = now - self._last_round >= self._canary_interval
        if due and self.canaries is not None and self.canary_errors is not None:
            self._last_round = now
            drawn = self.canaries.draw(self._canary_source)
            self.canary_errors.observe(drawn.errors, drawn.signed)
        if self.clamped_counts is not None:
            self.clamped_counts.observe(observations)

    def count_dead_letters(self, dead: Sequence[DeadLetter]) -> None:
        if not self._reasons:
            self.dead_lettered.inc(len(dead))
            return
        for letter in dead:
            self.dead_lettered.labels(letter.reason).inc()
