"""Hostile writers of the raw topic against a real worker and broker (issue 13).

The writers of the raw topic are devices, and devices are not trusted: they
can forge any field of a record, and (without an authenticated collector in
front) any Kafka header. These tests play such a writer.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from privstream.config import load_config
from privstream.estimate.source import run_topic_read

from tests.support.broker import create_topics
from tests.support.worker_proc import (
    PRIVACY,
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


POISON_HEADER = b"\xff\xfekey=val"
POISON_KEY = b"\xfe\xffdev"


def _good(seq: int) -> bytes:
    return json.dumps(
        {"device_id": f"d{seq}", "seq": seq, "salary": 2000.5, "state": "TX", "opted_in": True}
    ).encode()


async def _kcat_produce(bootstrap: str, topic: str, lines: list[bytes], *options: bytes) -> None:
    """Produce ``lines`` with kcat (librdkafka): bytes aiokafka's producer refuses to write."""
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat missing: `make system-deps` installs it"
    proc = await asyncio.create_subprocess_exec(
        kcat,
        *(b"-b", bootstrap.encode(), b"-P", b"-t", topic.encode(), b"-p", b"0", *options),
        stdin=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(b"\n".join(lines) + b"\n"), 60)
    assert proc.returncode == 0, err.decode(errors="replace")


async def test_a_header_key_that_is_not_utf8_is_a_dead_letter_not_a_crash(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Issue 13, item 2: one hostile header stopped every replica; now it is one dead letter.

    In one partition: 100 good records, three with the header key
    ``\\xff\\xfekey`` (gzip-compressed, so the fallback reader decompresses
    too) and a message key that is not UTF-8 either, one good record with a
    non-UTF-8 message key (keys are bytes: released), 100 more good ones.
    The worker must keep running, dead-letter exactly the three offsets
    (reason ``undecodable_header``, raw key and value kept, the header key
    escaped) and release every good record exactly once. ``estimate
    --topic`` reading the same topic skips the three and reads the rest.
    """
    kafka = unique_topics("hostile-poison")
    await create_topics(kafka_bootstrap, [kafka["input_topic"]], partitions=1)
    await create_topics(kafka_bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 1)
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, PRIVACY)
    raw = kafka["input_topic"]
    await produce(kafka_bootstrap, raw, [(b"k", _good(s), []) for s in range(100)])
    poison = [_good(1000 + i) for i in range(3)]
    await _kcat_produce(
        kafka_bootstrap, raw, poison, b"-z", b"gzip", b"-H", POISON_HEADER, b"-k", POISON_KEY
    )
    await _kcat_produce(kafka_bootstrap, raw, [_good(2000)], b"-k", b"\xc3\x28")
    await produce(kafka_bootstrap, raw, [(b"k", _good(s), []) for s in range(100, 200)])

    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with (
        Collector(kafka_bootstrap, kafka["output_topic"]) as out,
        Collector(kafka_bootstrap, kafka["dead_letter_topic"]) as dead,
        started(worker),
    ):
        await wait_while_alive(out, 201, worker, within_s=120)
        await wait_while_alive(dead, 3, worker, within_s=60)
        assert worker.alive
        assert await worker.terminate() == 0, worker.log_text()[-3000:]
    seqs = sorted(json.loads(r.value)["seq"] for r in out.records)
    assert seqs == [*range(200), 2000]  # each good record exactly once
    assert [r.value for r in dead.records] == poison
    for letter in dead.records:
        headers = dict(letter.headers)
        assert headers["privstream-reason"] == b"undecodable_header"
        assert headers["\\xff\\xfekey"] == b"val"
        assert letter.key == POISON_KEY

    read = await asyncio.to_thread(
        run_topic_read,
        load_config(config).kafka,
        raw,
        lambda value: None,
        expected_config="",
        skip=lambda reason: None,
        environ={},
        progress=None,
        idle_timeout=30.0,
    )
    assert (read.records, read.undecodable) == (201, 3)
