"""What the peer processes share: the worker's command line, and a stop on SIGTERM.

A peer (``bench/peer_librdkafka.py``, ``bench/peer_quix.py``) is started by
``bench.kafka.Worker`` exactly like `privstream run` (``run --config ...
--noise-key-file ... --replica-id ... --log-level ...``) and reads the topics,
group and bootstrap servers from the same YAML config, so ``drain_rate``
times it the same way: by the offsets its group commits.
"""

from __future__ import annotations

import argparse
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class PeerConfig:
    bootstrap: str
    input_topic: str
    output_topic: str
    group: str
    transactional_id: str
    fields: list[dict[str, Any]]
    #: ``kafka.schema_registry.url`` (the Avro peer's registry), None without one
    registry_url: str | None = None


def parse_args() -> PeerConfig:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--replica-id", default="0")
    parser.add_argument("--noise-key-file")  # the peers draw their own (non-keyed) noise
    parser.add_argument("--log-level")
    args = parser.parse_args()
    config = yaml.safe_load(args.config.read_text())
    kafka = config["kafka"]
    return PeerConfig(
        bootstrap=kafka["bootstrap_servers"],
        input_topic=kafka["input_topic"],
        output_topic=kafka["output_topic"],
        group=kafka["group_id"],
        transactional_id=f"{kafka['transactional_id_prefix']}-{args.replica_id}",
        fields=config["fields"],
        registry_url=(kafka.get("schema_registry") or {}).get("url"),
    )


def stop_on_sigterm() -> threading.Event:
    """An event set by SIGTERM (the benchmark stops every contender that way)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop
