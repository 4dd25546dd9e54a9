"""The one reference record every benchmark uses, and what the benchmarks share.

Eight fields: a dropped id, a public timestamp, two bounded reals (Laplace),
an integer counter (discrete Laplace), two categoricals (3 and 48 values,
randomized response) and a boolean (binary randomized response). Each noised
field spends epsilon 1, so the record is (6, 0)-DP.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

BATCH = 10_000
NETWORKS = ("wifi", "cellular", "ethernet")
COUNTRIES = tuple(f"C{i:02d}" for i in range(48))
TEMP_BOUNDS = (-20.0, 60.0)
LOAD_BOUNDS = (0.0, 100.0)
EVENT_BOUNDS = (0, 100)
EPSILON = 1.0  # per noised field

BODY: dict[str, Any] = {
    "privacy": {"epsilon": 6.0, "delta": 0.0},
    "fields": [
        {"name": "device_id", "kind": "drop"},
        {"name": "ts", "kind": "public"},
        # laplace, as the baselines (auto would pick hybrid at eps 1)
        {
            "name": "temp_c",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": list(TEMP_BOUNDS),
            "epsilon": EPSILON,
        },
        {
            "name": "load_pct",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": list(LOAD_BOUNDS),
            "epsilon": EPSILON,
        },
        {"name": "events", "kind": "integer", "bounds": list(EVENT_BOUNDS), "epsilon": EPSILON},
        {"name": "network", "kind": "categorical", "domain": list(NETWORKS), "epsilon": EPSILON},
        # randomized response, as the baselines (auto would pick local hashing at k = 48)
        {
            "name": "country",
            "kind": "categorical",
            "domain": list(COUNTRIES),
            "epsilon": EPSILON,
            "mechanism": "randomized_response",
        },
        {"name": "charging", "kind": "boolean", "epsilon": EPSILON},
    ],
}


def config_dict(kafka: dict[str, Any] | None = None) -> dict[str, Any]:
    """The reference config (``kafka`` section optional: the pipeline ignores it)."""
    base = {"bootstrap_servers": "127.0.0.1:9092", "input_topic": "bench.raw"}
    base.update(
        {"output_topic": "bench.sanitized", "dead_letter_topic": "bench.dlq", "group_id": "bench"}
    )
    return {"kafka": {**base, **(kafka or {})}, **json.loads(json.dumps(BODY))}


def record(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "device_id": f"dev-{rng.randrange(10**6):06d}",
        "ts": 1_718_000_000_000 + i,
        "temp_c": round(rng.uniform(-25.0, 65.0), 2),
        "load_pct": round(rng.uniform(0.0, 100.0), 1),
        "events": rng.randrange(0, 120),
        "network": rng.choice(NETWORKS),
        "country": rng.choice(COUNTRIES),
        "charging": rng.random() < 0.3,
    }


def messages(n: int = BATCH, seed: int = 7, start: int = 0) -> list[bytes]:
    """``n`` reference records as compact JSON (what producers send)."""
    rng = random.Random(seed)
    return [json.dumps(record(rng, start + i), separators=(",", ":")).encode() for i in range(n)]


#: the reference record plus two nested fields and two optional ones (10% absent or null):
#: issue 32's measure of nested paths and ``on_missing`` on the fast path
SYSTEMS = ("ios", "android", "web")
NESTED_FIELDS: list[dict[str, Any]] = [
    {"name": "device.os", "kind": "categorical", "domain": list(SYSTEMS), "epsilon": EPSILON},
    {"name": "device.app_version", "kind": "public"},
    {
        "name": "latency_ms",
        "kind": "real",
        "mechanism": "laplace",
        "bounds": [0.0, 500.0],
        "epsilon": EPSILON,
        "on_missing": "impute",
        "impute": 500.0,
    },
    {
        "name": "cart_value",
        "kind": "real",
        "mechanism": "laplace",
        "bounds": [0.0, 200.0],
        "epsilon": EPSILON,
        "on_missing": "null",
    },
]


def nested_config() -> dict[str, Any]:
    """The reference config with ``NESTED_FIELDS``."""
    config = config_dict()
    config["fields"] += json.loads(json.dumps(NESTED_FIELDS))
    config["privacy"]["epsilon"] += 3 * EPSILON
    return config


def nested_record(rng: random.Random, i: int) -> dict[str, Any]:
    """A reference record with a ``device`` object (and a key no field names) and the two
    optional fields, each absent in 5% of the records and null in 5%."""
    out = record(rng, i)
    out["device"] = {"os": rng.choice(SYSTEMS), "app_version": f"3.{i % 7}", "model": "x"}
    for name, value in (("latency_ms", round(rng.gammavariate(4, 40), 1)), ("cart_value", 9.5)):
        gap = rng.random()
        if gap >= 0.1:
            out[name] = value
        elif gap >= 0.05:
            out[name] = None
    return out


def nested_messages(n: int, seed: int = 7, start: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [
        json.dumps(nested_record(rng, start + i), separators=(",", ":")).encode() for i in range(n)
    ]


def plan() -> Any:
    from privstream.config import parse_config
    from privstream.kinds import build_plan

    return build_plan(parse_config(config_dict()))


def versions(*names: str) -> str:
    out = []
    for name in names:
        try:
            out.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{name} (absent)")
    return ", ".join(out)


def print_environment(*packages: str) -> None:
    print(
        f"# {platform.platform()}, cpus {os.cpu_count()}, python {platform.python_version()}, "
        + versions("numpy", "orjson", *packages)
    )


def best_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Best of ``repeats`` timings (the least disturbed run on a shared machine)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@dataclass
class Targets:
    """Measured values checked against their targets; ``report`` is 1 when one is missed."""

    rows: list[tuple[str, bool, bool]] = field(default_factory=list)

    def check(self, name: str, ratio: float, target: float, *, enforced: bool = True) -> None:
        """A ratio that must reach ``target``."""
        self.rows.append((f"{name}: {ratio:.2f}x (>= {target:g}x)", ratio >= target, enforced))

    def at_most(self, name: str, value: float, limit: float, unit: str) -> None:
        """A measured value that must stay at or below ``limit``."""
        self.rows.append((f"{name}: {value:.2f} {unit} (<= {limit:g})", value <= limit, True))

    def report(self) -> int:
        missed = 0
        for line, ok, enforced in self.rows:
            status = "ok" if ok else ("MISSED" if enforced else "missed (not enforced here)")
            missed += int(not ok and enforced)
            print(f"target {line} {status}")
        return 1 if missed else 0
