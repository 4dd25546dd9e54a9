"""File mode on Avro Object Container Files, against a fastavro read + write pass-through.

One container file of reference records (``bench/reference.py`` as the Avro
record of ``bench/avro_reference.py``, codec ``null``; 500,000 records,
``--quick``: 100,000), and three processes over it, each a fresh Python
process, in turn, round after round (each keeps its best wall time, as in
``bench/file_mode.py``):

* ``privstream sanitize --output-format avro`` with the reference config: Avro
  in, Avro out under the derived schema;
* the same with JSON Lines output (the default);
* a fastavro pass-through: ``fastavro.reader`` over the file, every record
  written back by ``fastavro.writer`` under the file's own schema (what moving
  the same records through Avro costs, no privacy).

Prints records per second, CPU seconds and peak RSS of each, and the ratios to
the pass-through (wall and CPU). No target: a note for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import compileall
import sys
import tempfile
from pathlib import Path

import fastavro
import orjson
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.file_mode import Run, timed  # noqa: E402
from bench.reference import config_dict, messages, print_environment  # noqa: E402

#: the reference record's Avro schema (``bench/avro_reference.SCHEMA``, which needs
#: confluent-kafka to import)
SCHEMA = {
    "type": "record",
    "name": "Reference",
    "namespace": "privstream.bench",
    "fields": [
        {"name": "device_id", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "temp_c", "type": "double"},
        {"name": "load_pct", "type": "double"},
        {"name": "events", "type": "long"},
        {"name": "network", "type": "string"},
        {"name": "country", "type": "string"},
        {"name": "charging", "type": "boolean"},
    ],
}

PASSTHROUGH = """
import sys, fastavro
with open(sys.argv[1], "rb") as src, open(sys.argv[2], "wb") as dst:
    records = fastavro.reader(src)
    fastavro.writer(dst, records.writer_schema, records, codec="null")
"""


def write_reference(path: Path, count: int, chunk: int = 50_000) -> None:
    def records() -> object:
        for start in range(0, count, chunk):
            for line in messages(min(chunk, count - start), seed=start, start=start):
                yield orjson.loads(line)

    with path.open("wb") as out:
        fastavro.writer(out, SCHEMA, records(), codec="null")


def sanitize(work: Path, data: Path, output_format: str) -> list[str]:
    config = work / "reference.yaml"
    config.write_text(yaml.safe_dump(config_dict()))
    return [
        *(sys.executable, "-m", "privstream.cli.main", "sanitize", "--config", str(config)),
        *("--input", str(data), "--output", str(work / f"out.{output_format}")),
        *("--output-format", output_format, "--dead-letter", str(work / "dead.jsonl")),
        "--overwrite",  # every round writes the same output again
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 records, 2 rounds")
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print_environment("fastavro")
    compileall.compile_dir(ROOT / "service" / "privstream", quiet=1)
    total = 100_000 if args.quick else args.records
    rounds = 2 if args.quick else args.rounds
    best: dict[str, Run] = {}
    with tempfile.TemporaryDirectory(prefix="privstream-avro-file-") as tmp:
        work = Path(tmp)
        data = work / "reference.avro"
        write_reference(data, total)
        runs = {
            "privstream sanitize, Avro out": sanitize(work, data, "avro"),
            "privstream sanitize, JSON out": sanitize(work, data, "json"),
            "fastavro read + write": [
                sys.executable,
                "-c",
                PASSTHROUGH,
                str(data),
                str(work / "p"),
            ],
        }
        for _ in range(rounds):
            for name, command in runs.items():
                run = timed(command)
                if name not in best or run.wall < best[name].wall:
                    best[name] = run
    for name, run in best.items():
        print(
            f"{name:32} {total / run.wall:12,.0f} records/s  ({total:,} in {run.wall:.2f} s, "
            f"{run.cpu:.2f} s CPU, peak RSS {run.rss_mb:.0f} MB)"
        )
    peer = best["fastavro read + write"]
    for name in ("privstream sanitize, Avro out", "privstream sanitize, JSON out"):
        ours = best[name]
        print(
            f"{name} / fastavro read + write: {peer.wall / ours.wall:.2f}x by wall time, "
            f"{peer.cpu / ours.cpu:.2f}x by CPU"
        )


if __name__ == "__main__":
    main()
