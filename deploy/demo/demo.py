"""`make demo`: synthetic telemetry through a real broker and `privstream run`.

Produces records (plus a few malformed ones) to a fresh raw topic, runs the
worker as a subprocess, reads the sanitized and dead-letter topics with
read_committed, prints raw and sanitized records side by side, the explain
table and a population mean recovered from the noisy data, then stops the
worker with SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import secrets
import signal
import sys
import tempfile
import time
from pathlib import Path

import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

ROOT = Path(__file__).resolve().parents[2]
COUNTRIES = ["US", "DE", "FR", "IN", "BR", "JP", "NZ"]  # NZ is outside the domain -> "other"
MALFORMED = [b"{not json", b'{"device_id": "d-x", "ts": 1}', b"\xff\xfe"]


def telemetry(seq: int) -> dict[str, object]:
    rnd = secrets.SystemRandom()  # any source will do for fake data
    return {
        "device_id": f"device-{rnd.randrange(10**6):06d}",
        "ts": 1_763_700_000_000 + seq,
        "seq": seq,
        "battery_temp_c": round(rnd.gauss(31.0, 6.0), 1),
        "session_minutes": round(rnd.expovariate(1 / 25), 1),
        "country": rnd.choice(COUNTRIES),
        "crashed": rnd.random() < 0.05,
        "os_build": "internal-build-7731",  # not in the config: must be dropped
    }


async def produce(bootstrap: str, topic: str, records: list[dict[str, object]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        for rec in records:
            await producer.send(topic, json.dumps(rec).encode(), key=str(rec["device_id"]).encode())
        for bad in MALFORMED:
            await producer.send(topic, bad)
        await producer.flush()
    finally:
        await producer.stop()


async def collect(
    bootstrap: str, topic: str, want: int, within_s: float
) -> list[tuple[bytes, dict[str, bytes]]]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        enable_auto_commit=False,
    )
    await consumer.start()
    out: list[tuple[bytes, dict[str, bytes]]] = []
    deadline = time.monotonic() + within_s
    try:
        while len(out) < want and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            out += [(m.value, dict(m.headers)) for msgs in batches.values() for m in msgs]
    finally:
        await consumer.stop()
    return out


def mean_and_se(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def demo_config(source: str, bootstrap: str, folder: Path) -> tuple[str, dict[str, str]]:
    """A copy of the config on fresh topics (so the demo can be rerun); returns its path."""
    run_id = secrets.token_hex(3)
    cfg = yaml.safe_load(Path(source).read_text())
    kafka = cfg["kafka"]
    kafka["bootstrap_servers"] = bootstrap
    for key in ("input_topic", "output_topic", "dead_letter_topic"):
        kafka[key] = f"{kafka[key]}.{run_id}"
    kafka["group_id"] = f"{kafka['group_id']}.{run_id}"
    cfg["http"] = {"host": "127.0.0.1", "port": 0}
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path), kafka


async def privstream(*args: str) -> asyncio.subprocess.Process:
    """Our own CLI, in a child process."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "privstream.cli.main", *args, cwd=ROOT
    )


async def main(bootstrap: str, records: int, config_path: str, kafka: dict[str, str]) -> int:
    topics = [kafka["input_topic"], kafka["output_topic"], kafka["dead_letter_topic"]]
    print(f"== topics {topics[0]} -> {topics[1]} (+ {topics[2]})")
    created = await privstream("topics", "create", "--config", config_path, "--partitions", "3")
    if await created.wait() != 0:
        return 1
    raw = [telemetry(seq) for seq in range(records)]
    # a production key lives in a Secret; the demo makes a throwaway one, deleted at the end
    # with its folder (whoever holds the key can recompute the noise and undo it)
    key_file = Path(config_path).with_suffix(".key")
    key_file.write_text(secrets.token_hex(32))
    key_file.chmod(0o600)
    worker = await privstream(
        "run",
        "--config",
        config_path,
        "--noise-key-file",
        str(key_file),
        "--replica-id",
        f"demo-{kafka['group_id']}",
        "--log-level",
        "WARNING",
    )
    try:
        started = time.monotonic()
        await produce(bootstrap, kafka["input_topic"], raw)
        print(f"== produced {len(raw)} telemetry records + {len(MALFORMED)} malformed ones")
        sanitized = await collect(bootstrap, kafka["output_topic"], len(raw), within_s=120)
        dead = await collect(bootstrap, kafka["dead_letter_topic"], len(MALFORMED), 30)
        elapsed = time.monotonic() - started
    finally:
        worker.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(worker.wait(), 60)
    print(
        f"== read {len(sanitized)} sanitized and {len(dead)} dead-lettered records"
        f" in {elapsed:.1f}s; worker exited with {code} after SIGTERM"
    )

    by_seq = {rec["seq"]: rec for rec in (json.loads(value) for value, _ in sanitized)}
    print("\n== raw vs sanitized (first 5 by seq; device_id and os_build are not released)")
    for rec in raw[:5]:
        print("raw      ", json.dumps(rec))
        print("sanitized", json.dumps(by_seq.get(rec["seq"])))
    print(
        "   One sanitized record is meant to be useless: each temperature comes out as one of\n"
        "   two values far outside its range (183.3 C or -143.3 C), the upper one a little more\n"
        "   likely the hotter the device. Aggregates over many records are the point: see the\n"
        "   mean at the end."
    )
    print("\n== dead letters (the raw message is kept in the dead-letter topic, with the reason)")
    for value, headers in dead:
        reason = headers.get("privstream-reason", b"?").decode()
        detail = headers.get("privstream-detail", b"").decode()
        print(f"{reason:16} {detail}  <- {value[:40]!r}")
    print("\n== privstream explain")
    await (await privstream("explain", "--config", config_path)).wait()

    true_mean, _ = mean_and_se([float(r["battery_temp_c"]) for r in raw])  # type: ignore[arg-type]
    noisy_mean, se = mean_and_se([float(r["battery_temp_c"]) for r in by_seq.values()])
    print(
        f"\n== aggregate: true mean battery_temp_c {true_mean:.2f}; estimated from the"
        f" sanitized records {noisy_mean:.2f} +/- {1.96 * se:.2f} (95%)"
    )
    ok = len(by_seq) == len(raw) and len(dead) == len(MALFORMED) and code == 0
    print("== demo OK" if ok else "== demo FAILED")
    return 0 if ok else 1


def cli() -> int:
    parser = argparse.ArgumentParser()
    default_bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    parser.add_argument("--bootstrap", default=default_bootstrap)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--config", default=str(ROOT / "examples" / "telemetry.yaml"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="privstream-demo-") as folder:
        config_path, kafka = demo_config(args.config, args.bootstrap, Path(folder))
        return asyncio.run(main(args.bootstrap, args.records, config_path, kafka))


if __name__ == "__main__":
    raise SystemExit(cli())
