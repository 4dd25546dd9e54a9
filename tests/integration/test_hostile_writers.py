"""Hostile writers of the raw topic against a real worker and broker (issue 13).

The writers of the raw topic are devices, and devices are not trusted: they
can forge any field of a record, and (without an authenticated collector in
front) any Kafka header. These tests play such a writer.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from tests.broker import create_topics
from tests.integration.worker_proc import (
    Collector,
    WorkerProcess,
    produce,
    started,
    unique_topics,
    wait_while_alive,
    write_config,
)

DOMAIN = ["a", "b", "c", "d"]
MEMO_BODY: dict[str, Any] = {
    "privacy": {"epsilon": 3.0},
    "fields": [
        {"name": "device", "kind": "drop"},
        {"name": "tag", "kind": "public"},
        {
            "name": "os",
            "kind": "categorical",
            "domain": DOMAIN,
            "epsilon": 1.0,
            "memo_identity": "message_key",
        },
        {
            "name": "url",
            "kind": "categorical",
            "mechanism": "local_hashing",
            "epsilon": 2.0,
            "memo_identity": "message_key",
        },
    ],
}


def _record(device: str, tag: int, value: int) -> bytes:
    return json.dumps(
        {"device": device, "tag": tag, "os": DOMAIN[value], "url": f"https://ex.org/{value}"}
    ).encode()


async def test_probing_attacker_recovers_nothing_beyond_chance(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The memo oracle of issue 13, through `privstream run` and the broker.

    200 victims, keyed ``victim-i`` by the (trusted) collector, report a
    uniformly random value of a 4-value domain (randomized response at
    epsilon 1, memoized by the message key) and of a local-hashing field.
    The attacker writes, for every victim and candidate value, a probe that
    carries the victim's id in the device field under its own key
    (``attacker-i``), tagged through a public field, plus a probe with no
    key at all (dead-lettered: ``missing_key``). Each victim also repeats
    its report: memoized, the answer repeats.

    Had the answer been keyed by the device field (the old design), every
    victim's true value would be among the candidates whose probe answer
    equals the victim's, and OLH probe seeds would match the victim's seed.
    Keyed by the message key, probes are independent of the victim, so the
    truth survives with probability at most ``p = e / (e + 3)`` per victim:
    bound ``200 p + 5 sd`` (one-sided normal tail 2.9e-7); a seed match has
    probability 800 * 2**-64.
    """
    victims = 200
    kafka = unique_topics("hostile-memo")
    await create_topics(kafka_bootstrap, [kafka["input_topic"]], partitions=2)
    await create_topics(kafka_bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 1)
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, MEMO_BODY)
    truth = np.random.default_rng(1313).integers(0, len(DOMAIN), size=victims)
    probe_tag, repeat_tag = 10 * victims, 5 * victims
    messages: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]] = [
        (f"victim-{i}".encode(), _record(f"victim-{i}", i, truth[i]), []) for i in range(victims)
    ]
    messages += [
        (f"attacker-{i}".encode(), _record(f"victim-{i}", probe_tag + i * len(DOMAIN) + c, c), [])
        for i in range(victims)
        for c in range(len(DOMAIN))
    ]
    messages += [
        (f"victim-{i}".encode(), _record(f"victim-{i}", repeat_tag + i, truth[i]), [])
        for i in range(victims)
    ]
    messages.append((None, _record("victim-0", -1, 0), []))
    await produce(kafka_bootstrap, kafka["input_topic"], messages)

    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with (
        Collector(kafka_bootstrap, kafka["output_topic"]) as out,
        Collector(kafka_bootstrap, kafka["dead_letter_topic"]) as dead,
        started(worker),
    ):
        await wait_while_alive(out, len(messages) - 1, worker, within_s=120)
        await wait_while_alive(dead, 1, worker, within_s=60)
        assert await worker.terminate() == 0
    by_tag = {json.loads(r.value)["tag"]: json.loads(r.value) for r in out.records}
    assert len(by_tag) == len(out.records) == len(messages) - 1  # each released once
    (letter,) = dead.records
    assert dict(letter.headers)["privstream-reason"] == b"missing_key"

    in_set = 0
    for i in range(victims):
        victim = by_tag[i]
        assert by_tag[repeat_tag + i]["os"] == victim["os"]  # memoized: the same answer
        assert by_tag[repeat_tag + i]["url"] == victim["url"]
        probes = [by_tag[probe_tag + i * len(DOMAIN) + c] for c in range(len(DOMAIN))]
        consistent = [c for c, probe in enumerate(probes) if probe["os"] == victim["os"]]
        in_set += int(truth[i] in consistent)
        assert all(probe["url"]["seed"] != victim["url"]["seed"] for probe in probes)
    p = math.e / (math.e + len(DOMAIN) - 1)
    bound = victims * p + 5 * math.sqrt(victims * p * (1 - p))
    assert in_set <= bound, f"the truth survived the probes for {in_set}/{victims} victims"
