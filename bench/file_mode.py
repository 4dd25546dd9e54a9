"""File mode as a user runs it: whole processes over one JSON Lines file, start-up included.

Two files, each with its own contenders, every contender a fresh Python process:

* the reference file: reference records (``bench/reference.py``; 500,000 of them,
  ``--quick``: 100,000), against ``privstream sanitize`` with the reference config,
  an orjson decode + encode process (read the file line by line, write every record
  back: what moving the same JSON costs) and the diffprivlib per-record loop of
  ``bench/pipeline.py`` as a process over the same file (``--diffprivlib-records N``:
  its first N lines only);
* the nested file: the reference records plus a ``device`` object (two fields named
  ``device.os``, ``device.app_version``) and two optional fields (10% absent or null,
  ``on_missing: impute`` and ``null``; ``bench/reference.py``), as many as the reference
  file, against ``privstream sanitize`` with that config and the same orjson process;
* the vector file: records of an id and one 128-d vector (60,000 of them, ``--quick``:
  20,000), against ``privstream sanitize`` with a vector config (the id dropped, the
  vector through the Gaussian mechanism) and the same orjson process.

Contenders run in turn, round after round; each keeps its best wall time (the
least disturbed by the other tenants of a shared machine); CPU seconds (user +
system) and peak RSS of that round are printed beside. privstream's modules are
byte-compiled first, as ``pip install`` does (with ``PYTHONDONTWRITEBYTECODE``
set, as on CI machines, every start-up would otherwise compile them again).
The same ratios by CPU seconds are printed too (not targets). Targets: on the
reference file privstream >= 0.7x the orjson process and >= 30x the diffprivlib
loop; on the nested file >= 0.7x the orjson process; on the vector file >= 0.3x
the orjson process; every privstream process under 300 MB. Exit status 1 if one is missed.
"""

from __future__ import annotations

import argparse
import compileall
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.reference import (  # noqa: E402
    Targets,
    config_dict,
    messages,
    nested_config,
    nested_messages,
    print_environment,
)

ORJSON = """
import sys, orjson
loads, dumps = orjson.loads, orjson.dumps
with open(sys.argv[1], "rb") as src, open(sys.argv[2], "wb") as dst:
    dst.writelines(dumps(loads(line)) + b"\\n" for line in src)
"""

DIFFPRIVLIB = """
import itertools, sys
sys.path.insert(0, sys.argv[3])
from bench.pipeline import diffprivlib_loop
run = diffprivlib_loop()
with open(sys.argv[1], "rb") as src, open(sys.argv[2], "wb") as dst:
    lines = list(itertools.islice(src, int(sys.argv[4])))
    dst.writelines(out + b"\\n" for out in run(lines))
"""

DIMENSION = 128
VECTOR_FIELDS = [
    {"name": "id", "kind": "drop"},
    {"name": "embedding", "kind": "vector", "dimension": DIMENSION, "l2_bound": 1.0},
]
RSS_LIMIT_MB = 300.0


@dataclass
class Run:
    wall: float
    cpu: float
    rss_mb: float


@dataclass
class Contender:
    command: list[str]
    records: int


def write_reference(path: Path, count: int, chunk: int = 50_000, *, nested: bool = False) -> None:
    make = nested_messages if nested else messages
    with path.open("wb") as out:
        for start in range(0, count, chunk):
            out.write(b"\n".join(make(min(chunk, count - start), seed=start, start=start)))
            out.write(b"\n")


def write_vectors(path: Path, count: int) -> None:
    """Embedding-like rows: coordinates ~ N(0, 0.1^2) with 6 decimals (norms about 1.1)."""
    rng = random.Random(11)
    with path.open("wb") as out:
        for i in range(count):
            vector = [round(rng.gauss(0.0, 0.1), 6) for _ in range(DIMENSION)]
            out.write(orjson.dumps({"id": f"doc-{i:07d}", "embedding": vector}) + b"\n")


def vector_config() -> dict[str, object]:
    fields = [dict(field) for field in VECTOR_FIELDS]
    fields[1].update(epsilon=1.0, delta=1e-6)
    config = config_dict()
    config.update(privacy={"epsilon": 1.0, "delta": 1e-6}, fields=fields)
    return config


def timed(command: list[str]) -> Run:
    """Wall seconds, CPU seconds (user + system) and peak RSS of one process."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"{command[:4]} failed with status {process.returncode}")
    # ru_maxrss is in KiB on Linux
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def sanitize(work: Path, config: dict[str, object], data: Path, tag: str) -> list[str]:
    path = work / f"{tag}.yaml"
    path.write_text(yaml.safe_dump(config))
    return [
        *(sys.executable, "-m", "privstream.cli.main", "sanitize", "--config", str(path)),
        *("--input", str(data), "--output", str(work / f"{tag}.out.jsonl")),
        *("--dead-letter", str(work / f"{tag}.dead.jsonl")),
        "--overwrite",  # every round writes the same output again
    ]


def contenders(work: Path, args: argparse.Namespace) -> dict[str, Contender]:
    """Name -> (command, records it processes); writes the two input files."""
    py = sys.executable
    dp_script = [py, "-c", DIFFPRIVLIB, str(work / "reference.jsonl"), str(work / "dp.jsonl")]
    total = 100_000 if args.quick else args.records
    vectors = 20_000 if args.quick else args.vectors
    dp_records = total if args.diffprivlib_records is None else min(args.diffprivlib_records, total)
    reference, vector = work / "reference.jsonl", work / "vectors.jsonl"
    nested = work / "nested.jsonl"
    write_reference(reference, total)
    write_reference(nested, total, nested=True)
    write_vectors(vector, vectors)
    return {
        "privstream sanitize": Contender(sanitize(work, config_dict(), reference, "ref"), total),
        "orjson decode/encode": Contender(
            [py, "-c", ORJSON, str(reference), str(work / "oj.jsonl")], total
        ),
        "diffprivlib per-record loop": Contender(
            [*dp_script, str(ROOT), str(dp_records)], dp_records
        ),
        "privstream sanitize, nested": Contender(
            sanitize(work, nested_config(), nested, "nested"), total
        ),
        "orjson decode/encode, nested": Contender(
            [py, "-c", ORJSON, str(nested), str(work / "oj-nested.jsonl")], total
        ),
        "privstream sanitize, 128-d": Contender(
            sanitize(work, vector_config(), vector, "vec"), vectors
        ),
        "orjson decode/encode, 128-d": Contender(
            [py, "-c", ORJSON, str(vector), str(work / "oj-vec.jsonl")], vectors
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller files, 2 rounds")
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--vectors", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--diffprivlib-records", type=int, help="default: the whole file")
    args = parser.parse_args()
    print_environment("diffprivlib")
    compileall.compile_dir(ROOT / "service" / "privstream", quiet=1)
    rounds = 2 if args.quick else args.rounds
    best: dict[str, Run] = {}
    with tempfile.TemporaryDirectory(prefix="privstream-file-") as tmp:
        work = Path(tmp)
        runs = contenders(work, args)
        for _ in range(rounds):
            for name, contender in runs.items():
                for dead in work.glob("*.dead.jsonl"):
                    dead.unlink()
                run = timed(contender.command)
                if name not in best or run.wall < best[name].wall:
                    best[name] = run
    rate = {}
    for name, run in best.items():
        count = runs[name].records
        rate[name] = count / run.wall
        print(
            f"{name:30} {rate[name]:12,.0f} records/s  ({count:,} in {run.wall:.2f} s, "
            f"{run.cpu:.2f} s CPU, peak RSS {run.rss_mb:.0f} MB)"
        )
    # the same ratios by CPU seconds (user + system) per record: what other tenants of a
    # shared machine disturb less than wall time (information, not targets)
    cpu = {name: run.cpu / runs[name].records for name, run in best.items()}
    for name, peer in (
        ("privstream sanitize", "orjson decode/encode"),
        ("privstream sanitize", "diffprivlib per-record loop"),
        ("privstream sanitize, nested", "orjson decode/encode, nested"),
        ("privstream sanitize, 128-d", "orjson decode/encode, 128-d"),
    ):
        print(f"by CPU: {name} / {peer}: {cpu[peer] / cpu[name]:.2f}x")
    targets = Targets()
    ours = rate["privstream sanitize"]
    targets.check("privstream / orjson process", ours / rate["orjson decode/encode"], 0.7)
    targets.check(
        "privstream / diffprivlib process", ours / rate["diffprivlib per-record loop"], 30
    )
    nest = rate["privstream sanitize, nested"] / rate["orjson decode/encode, nested"]
    targets.check("privstream / orjson process, nested and optional fields", nest, 0.7)
    vec = rate["privstream sanitize, 128-d"] / rate["orjson decode/encode, 128-d"]
    targets.check("privstream / orjson process, 128-d vectors", vec, 0.3)
    for name in (
        "privstream sanitize",
        "privstream sanitize, nested",
        "privstream sanitize, 128-d",
    ):
        targets.at_most(f"{name} peak RSS", best[name].rss_mb, RSS_LIMIT_MB, "MB")
    sys.exit(targets.report())


if __name__ == "__main__":
    main()
