"""Peer: a Quix Streams exactly-once app that applies the same mechanisms per record.

What a user who writes their own app gets: ``processing_guarantee=
"exactly-once"``, JSON in and out, and for each record numpy draws on the
reference record's fields: Laplace on the bounded reals (clamped, scale
width / epsilon), the two-sided geometric on the integer (clamped), k-ary
randomized response on the categoricals and the boolean; the id is
dropped. numpy's PCG64 stands in for a secure source (the peer need not be
private, only as costly as a straightforward one). ``commit_interval`` is
1 s instead of Quix's 5 s so that ``drain_rate`` (which times commits) is
not quantized by the checkpoint interval. Started by ``bench/e2e.py``
(``bench/peer_common.py``: command line and config).
"""

from __future__ import annotations

import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from quixstreams import Application

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.peer_common import parse_args

Rule = Callable[[Any], Any]


def rules(fields: list[dict[str, Any]], rng: np.random.Generator) -> dict[str, Rule | None]:
    """Per field: None (dropped) or the function that releases one value."""
    out: dict[str, Rule | None] = {}
    for spec in fields:
        kind, eps = spec["kind"], spec.get("epsilon", 1.0)
        if kind == "drop":
            out[spec["name"]] = None
        elif kind == "real":
            lo, hi = spec["bounds"]
            scale = (hi - lo) / eps
            out[spec["name"]] = lambda v, lo=lo, hi=hi, s=scale: float(
                min(max(v, lo), hi) + rng.laplace(0.0, s)
            )
        elif kind == "integer":
            lo, hi = spec["bounds"]
            p = 1.0 - math.exp(-eps / (hi - lo))  # two-sided geometric, sensitivity hi - lo
            out[spec["name"]] = lambda v, lo=lo, hi=hi, p=p: int(
                min(max(v, lo), hi) + rng.geometric(p) - rng.geometric(p)
            )
        elif kind in ("categorical", "boolean"):
            domain = list(spec["domain"]) if kind == "categorical" else [False, True]
            keep = math.exp(eps) / (math.exp(eps) + len(domain) - 1)
            out[spec["name"]] = lambda v, d=domain, keep=keep: (
                v if rng.random() < keep else d[(d.index(v) + rng.integers(1, len(d))) % len(d)]
            )
    return out


def main() -> None:
    config = parse_args()
    rng = np.random.default_rng()
    release = rules(config.fields, rng)

    def sanitize(record: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, value in record.items():
            rule = release.get(name, lambda v: v)
            if rule is not None:
                out[name] = rule(value)
        return out

    with tempfile.TemporaryDirectory(prefix="quix-state-") as state:
        app = Application(
            broker_address=config.bootstrap,
            consumer_group=config.group,
            auto_offset_reset="earliest",
            processing_guarantee="exactly-once",
            commit_interval=1.0,
            state_dir=state,
            auto_create_topics=False,
        )
        source = app.topic(config.input_topic, value_deserializer="json")
        sink = app.topic(config.output_topic, value_serializer="json")
        app.dataframe(source).apply(sanitize).to_topic(sink)
        app.run()


if __name__ == "__main__":
    main()
