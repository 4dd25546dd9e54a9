"""Shared helpers for the unit tests: config builders and the DESIGN.md formulas.

The formulas here are transcribed from /work/shared/DESIGN.md section 1
("Calibrations" and "Accuracy lower bounds"), written the plain way
(``math.log``, ``math.exp``), independently of the code under test.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from aiokafka import ConsumerRecord

KAFKA: dict[str, Any] = {
    "input_topic": "raw",
    "output_topic": "sanitized",
    "dead_letter_topic": "dlq",
}


def consumer_record(
    offset: int,
    value: bytes,
    key: bytes | None,
    *,
    partition: int = 0,
    kind: type[ConsumerRecord[Any, Any]] = ConsumerRecord,
) -> ConsumerRecord[Any, Any]:
    """A record of topic ``raw`` as aiokafka's consumer hands it over, stamped now."""
    return kind(
        topic="raw",
        partition=partition,
        offset=offset,
        timestamp=int(time.time() * 1000),
        timestamp_type=0,
        key=key,
        value=value,
        checksum=None,
        serialized_key_size=len(key or b""),
        serialized_value_size=len(value),
        headers=[],
    )


def config_dict(
    fields: list[dict[str, Any]], epsilon: float = 10.0, delta: float = 0.0
) -> dict[str, Any]:
    """A complete config mapping around the given field list."""
    return {
        "kafka": dict(KAFKA),
        "privacy": {"epsilon": epsilon, "delta": delta},
        "fields": fields,
    }


# --- DESIGN.md section 1, written from the text --------------------------------


def laplace_tight_scale(diam: float, eps: float, delta: float) -> float:
    """Tight calibration: b = diam / (eps - 2 ln(1 - delta))."""
    return diam / (eps - 2.0 * math.log(1.0 - delta))


def laplace_thesis_scale(diam: float, eps: float, delta: float) -> float:
    """Thesis Example 4.9: b = diam / (eps - ln(1 - delta))."""
    return diam / (eps - math.log(1.0 - delta))


def laplace_gamma(diam: float, eps: float, delta: float) -> float:
    """Theorem 5.3: gamma >= (1 - delta) diam / (2 (1 + e^eps)), in log space (no overflow)."""
    return (1.0 - delta) * diam / 2.0 * math.exp(-float(np.logaddexp(0.0, eps)))


def rr_p(m: int, eps: float, delta: float) -> float:
    """Example 4.10 with equality: p = (1 - delta) / (m + e^eps), in log space."""
    return (1.0 - delta) * math.exp(-float(np.logaddexp(math.log(m), eps)))


def rr_gamma(m: int, eps: float, delta: float) -> float:
    """Theorem 5.5 with kappa = 1: gamma >= (1 - delta) m / (m + e^eps) (moderate eps only)."""
    return (1.0 - delta) * m / (m + math.exp(eps))


class CountingSource:
    """Wraps a seeded source and records every ``words`` call (the once-per-release contract)."""

    def __init__(self, seed: int) -> None:
        from privstream.testing import SeededSource

        self.inner = SeededSource(seed)
        self.calls: list[tuple[int, int]] = []

    def words(self, n: int, k: int) -> Any:
        self.calls.append((n, k))
        return self.inner.words(n, k)
