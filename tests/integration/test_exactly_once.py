"""Exactly-once under kill -9 (DESIGN.md section 4), on a real broker.

50,000 raw records stream into a 4-partition topic while the worker is
killed with SIGKILL at random points (6 times, each inside an open
transaction, while the output is incomplete) and restarted with the same
replica id, hence the same transactional id: the restart aborts the killed
worker's open transaction.

Checked afterwards:

* read_committed, the sanitized topic holds every input exactly once (the
  public ``seq`` field says which) and the dead-letter topic every malformed
  input exactly once (its ``privstream-source`` header says which);
* every committed output is byte-identical to ``replay_expected`` (what an
  uncrashed worker with the same key makes of that input);
* read_uncommitted, the aborted copies written by killed workers are there
  too, and every copy of a record, aborted or committed, is byte-identical
  to the expected bytes: replays happened, and released nothing new;
* the DEBUG logs of all the workers hold no raw value.

Kill points and the kill loop: ``tests/support/kill_nine.py`` (``KILLS`` kills,
thresholds on the inputs accounted for drawn with ``random.Random(SEED)``,
the producer paced by the loop and at most ``AHEAD`` inputs ahead). The loop
kills a worker only while it is frozen (SIGSTOP) with a transaction open on
the output topic (the broker's last stable offset below its high watermark,
seen twice), and holds input back so that every kill lands mid-stream; so
"some record has more than one copy" fails only if every kill missed, each
by a commit sent just before the freeze. In four runs (one beside the two
other kill tests, load average 9 on 2 cores) 1,555 to 2,097 seqs had more
than one copy, all six kills mid-stream after 1 to 6 attempts each, and the
aborted copies equalled the records the loop saw open at its kills: no kill
missed.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from aiokafka import ConsumerRecord

from tests.support.faults import (
    assert_dead_once,
    assert_each_once,
    fault_topics,
    is_bad,
    read_to_end,
    seq_of,
    source_of,
)
from tests.support.kill_nine import KillPlan, kill_thresholds, stream_with_kills
from tests.support.worker_proc import (
    TEST_SECRET,
    Message,
    read_all,
    replay_expected,
    write_config,
)

SEED = 20_240_604
TOTAL = 50_000  # inputs; every 100th one is malformed
KILLS = 6
BATCH = 400  # max_batch_records: many small transactions
AHEAD = 8_000  # how far the producer may run ahead of the committed output
CHUNK = 1_000
CANARY = "CANARY"
# 27/128: exact in binary, so every raw salary prints as NNNN.2109375
RAW_FRACTION = 0.2109375
RAW_SALARY = re.compile(r"\d\.2109375(?!\d)")

BODY = {
    "privacy": {"epsilon": 2.5, "delta": 1.0e-6},
    "fields": [
        {"name": "device_id", "kind": "drop"},
        {"name": "seq", "kind": "public"},
        {
            "name": "salary",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": [1504, 4500],
            "epsilon": 1.0,
        },
        {"name": "visits", "kind": "integer", "bounds": [0, 1000], "epsilon": 0.5},
        {"name": "state", "kind": "categorical", "domain": ["TX", "CA", "NY"], "epsilon": 0.5},
        {"name": "opted_in", "kind": "boolean", "epsilon": 0.5, "delta": 1.0e-6},
    ],
}
BAD_REASONS = ("invalid_json", "missing_field", "wrong_type", "unknown_category")


def good_record(i: int) -> dict[str, object]:
    return {
        "device_id": f"{CANARY}-DEVICE-{i}",
        "seq": i,
        "salary": 1504 + (i % 2996) + RAW_FRACTION,
        "visits": i % 1001,
        "state": ("TX", "CA", "NY")[i % 3],
        "opted_in": i % 2 == 0,
        "internal_note": f"{CANARY}-NOTE-{i}",  # not in the config: dropped
    }


def bad_value(i: int) -> tuple[bytes, str]:
    """Malformed input i (seq i, unique, carries canaries) and the reason it is dead-lettered."""
    record = good_record(i)
    kind = (i // 100) % 4
    reason = BAD_REASONS[kind]
    if kind == 0:
        return f'{{"device_id": "{CANARY}-BAD-{i}", "seq": {i}, oops'.encode(), reason
    if kind == 1:
        del record["state"]
    elif kind == 2:
        record["visits"] = f"{CANARY}-MANY-{i}"
    else:
        record["state"] = f"{CANARY}-STATE-{i}"
    return json.dumps(record).encode(), reason


def message(i: int) -> Message:
    value = bad_value(i)[0] if is_bad(i) else json.dumps(good_record(i)).encode()
    return (f"{CANARY}-KEY-{i}".encode(), value, [("trace", f"{CANARY}-HEADER-{i}".encode())])


def header(record: ConsumerRecord, name: str) -> str:
    return str(dict(record.headers)[name].decode())


async def test_kill_nine_mid_stream_exactly_once(kafka_bootstrap: str, tmp_path: Path) -> None:
    kafka = await fault_topics(kafka_bootstrap, "eos")
    source_topic = kafka["input_topic"]
    overrides = {
        **kafka,
        "transactions": True,
        "max_batch_records": BATCH,
        "session_timeout_ms": 6000,
    }
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, overrides, BODY)

    messages = [message(i) for i in range(TOTAL)]
    good_seqs = {i for i in range(TOTAL) if not is_bad(i)}
    thresholds = kill_thresholds(TOTAL, KILLS, SEED)
    plan = KillPlan(thresholds, TOTAL, ahead=AHEAD, chunk=CHUNK)
    run = await stream_with_kills(
        kafka_bootstrap, kafka, config, messages, plan, logs=tmp_path, identity=seq_of
    )
    coords, workers, kills = run.coords, run.workers, run.kills

    sanitized = await read_all(kafka_bootstrap, kafka["output_topic"], partitions=4)
    every_copy = await read_to_end(
        kafka_bootstrap, kafka["output_topic"], 4, isolation_level="read_uncommitted"
    )
    dead_letters = await read_all(kafka_bootstrap, kafka["dead_letter_topic"], partitions=2)
    dead_copies = await read_to_end(
        kafka_bootstrap, kafka["dead_letter_topic"], 2, isolation_level="read_uncommitted"
    )
    expected = replay_expected(config, TEST_SECRET, source_topic, coords, [m[1] for m in messages])
    assert [i for i, e in enumerate(expected) if e is None] == sorted(set(range(TOTAL)) - good_seqs)
    summary = (
        f"thresholds={thresholds} kills={kills} committed={len(sanitized)} "
        f"copies={len(every_copy)} dead={len(dead_letters)} dead_copies={len(dead_copies)} "
        f"stream_s={run.seconds:.1f}"
    )
    print(summary)

    # every kill while the stream was incomplete, or the test proves less
    assert run.kills_before(TOTAL) == KILLS, summary

    # read_committed: every good input exactly once, byte-identical to an uncrashed run
    assert_each_once(sanitized, good_seqs, expected, summary)

    # read_uncommitted: aborted copies exist, and every copy is the expected bytes
    copies = Counter(seq_of(r) for r in every_copy)
    differ = [seq_of(r) for r in every_copy if r.value != expected[seq_of(r)]]
    assert not differ, f"a replayed copy differs for seqs {differ[:20]}; {summary}"
    assert copies.keys() == good_seqs, summary
    replayed = sum(1 for c in copies.values() if c > 1)
    assert replayed > 0, f"no kill landed inside a transaction; {summary}"
    print(f"{replayed} seqs written more than once (aborted copies identical)")

    # dead letters: every malformed input exactly once, raw bytes kept, with the reason
    index_of = assert_dead_once(dead_letters, source_topic, coords, summary)
    for record in dead_copies:  # committed and aborted copies alike
        i = index_of[source_of(record)]
        assert record.value == messages[i][1]
        assert header(record, "privstream-reason") == bad_value(i)[1]

    # no raw value in the DEBUG logs of any worker (killed ones included)
    for worker in workers:
        text = worker.log_text()
        assert "DEBUG" in text, f"{worker.log}: not a DEBUG log"
        assert CANARY not in text, f"{worker.log} holds a raw value"
        assert not RAW_SALARY.search(text), f"{worker.log} holds a raw salary"
