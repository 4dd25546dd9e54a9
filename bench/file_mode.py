"""File mode as a user runs it: whole processes over one JSON Lines file, start-up included.

Contenders, each a fresh Python process over the same file of reference records
(``bench/reference.py``; 500,000 of them, ``--quick``: 100,000):

* ``privstream sanitize --input ... --output ...``;
* an orjson decode + encode process (read the file line by line, write every
  record back): what moving the same JSON costs;
* the diffprivlib per-record loop of ``bench/pipeline.py`` as a process over the
  same file (``--diffprivlib-records N``: its first N lines only, a shorter run
  that weighs its one-second start-up more).

Contenders run in turn, round after round; each keeps its best wall time (the
least disturbed by the other tenants of a shared machine); CPU seconds (user +
system, of that best round) are printed beside. Targets: privstream >= 0.7x the
orjson process, >= 30x the diffprivlib loop. Exit status 1 if one is missed.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.reference import Targets, config_dict, messages, print_environment  # noqa: E402

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


def write_input(path: Path, count: int, chunk: int = 50_000) -> None:
    with path.open("wb") as out:
        for start in range(0, count, chunk):
            out.write(b"\n".join(messages(min(chunk, count - start), seed=start, start=start)))
            out.write(b"\n")


def timed(command: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


def contenders(
    work: Path, data: Path, total: int, dp_records: int | None
) -> dict[str, tuple[list[str], int]]:
    """Name -> (command, records it processes)."""
    dp_records = total if dp_records is None else min(dp_records, total)
    config = work / "config.yaml"
    config.write_text(yaml.safe_dump(config_dict()))
    py = sys.executable
    sanitize = [py, "-m", "privstream.cli.main", "sanitize", "--config", str(config)]
    return {
        "privstream sanitize": (
            [
                *sanitize,
                "--input",
                str(data),
                "--output",
                str(work / "out.jsonl"),
                "--dead-letter",
                str(work / "dead.jsonl"),
            ],
            total,
        ),
        "orjson decode/encode": ([py, "-c", ORJSON, str(data), str(work / "oj.jsonl")], total),
        "diffprivlib per-record loop": (
            [py, "-c", DIFFPRIVLIB, str(data), str(work / "dp.jsonl"), str(ROOT), str(dp_records)],
            dp_records,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 records, 2 rounds")
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--diffprivlib-records", type=int, help="default: the whole file")
    args = parser.parse_args()
    print_environment("diffprivlib")
    total = 100_000 if args.quick else args.records
    rounds = 2 if args.quick else args.rounds
    best: dict[str, tuple[float, float, int]] = {}
    with tempfile.TemporaryDirectory(prefix="privstream-file-") as tmp:
        work = Path(tmp)
        data = work / "in.jsonl"
        write_input(data, total)
        runs = contenders(work, data, total, args.diffprivlib_records)
        for _ in range(rounds):
            for name, (command, count) in runs.items():
                (work / "dead.jsonl").unlink(missing_ok=True)
                wall, cpu = timed(command)
                if name not in best or wall < best[name][0]:
                    best[name] = (wall, cpu, count)
    rate = {}
    for name, (wall, cpu, count) in best.items():
        rate[name] = count / wall
        print(
            f"{name:28} {rate[name]:12,.0f} records/s  ({count:,} in {wall:.2f} s, {cpu:.2f} s CPU)"
        )
    ours = rate["privstream sanitize"]
    targets = Targets()
    targets.check("privstream / orjson process", ours / rate["orjson decode/encode"], 0.7)
    targets.check(
        "privstream / diffprivlib process", ours / rate["diffprivlib per-record loop"], 30
    )
    sys.exit(targets.report())


if __name__ == "__main__":
    main()
