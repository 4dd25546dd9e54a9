"""Every Prometheus instrument privstream exports, built against one registry.

Labels carry field names, mechanism names and reason codes only: never a
raw value. Tests pass a fresh ``CollectorRegistry``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from service import __version__
from service.field_errors import FieldErrors
from service.pipeline import RecordPlan

_BATCH_SIZE_BUCKETS = (1, 10, 50, 100, 250, 500, 1000, 2000, 5000, 10000, 50000)


class Metrics:
    """The service's instruments; per-field guarantee gauges are set from the plan."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.field_errors: FieldErrors | None = None
        self.records_in = Counter(
            "privstream_records_in", "Raw records consumed", registry=registry
        )
        self.records_out = Counter(
            "privstream_records_out", "Sanitized records produced", registry=registry
        )
        self.dead_lettered = Counter(
            "privstream_records_dead_lettered",
            "Records sent to the dead-letter output, by reason code",
            ["reason"],
            registry=registry,
        )
        self.batch_seconds = Histogram(
            "privstream_batch_duration_seconds",
            "Wall time from a polled batch to its committed offsets",
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
        self.build_info = Gauge(
            "privstream_build_info",
            "Always 1; labels give the version and the config hash",
            ["version", "config_sha256"],
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

    def describe_plan(self, plan: RecordPlan, *, clamped_counts: bool = True) -> FieldErrors:
        """Publish the configuration's guarantees; returns the per-field error collector."""
        self.field_errors = FieldErrors(plan, clamped_counts=clamped_counts)
        self.registry.register(self.field_errors)
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
        return self.field_errors
