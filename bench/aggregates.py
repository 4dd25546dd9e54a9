"""Aggregates in the central model against PipelineDP and against the local model (issue 34).

Synthetic telemetry: ``--events`` events (default 1,000,000; ``--quick``: 100,000) of
``--subjects`` subjects (100,000; ``--quick``: 10,000) over 24 hourly windows. Each
subject has one app version (20 keys) and one OS (3 values), as a device does; its
events fall in uniformly random hours. The aggregate under test is the histogram of
``os`` by ``version`` per window (60 cells), epsilon 1, ``records_per_group: 2,
groups_per_subject: 1``. Measured in one run:

* **coverage** of the released 95% intervals: the share of (window, cell, release)
  whose interval holds the bounded count, over ``--releases`` releases of every window
  (target 0.93-0.97);
* **MSE against PipelineDP** (``pipeline-dp``, its ``LocalBackend``) run in this script
  on the same records at equal epsilon, delta (0: Laplace on public partitions) and
  contribution bounds, one pass over all windows (the privacy unit is (subject, window),
  partitions (window, version, os)), ``--pipelinedp-runs`` times: the ratio of the
  MSEs against the raw counts, with its standard error (target <= 1.1x);
* **MSE against the local model**: ``os`` released per record by randomized response at
  the same epsilon (``privstream sanitize``), counts per (window, version) estimated
  by ``privstream.estimate`` (``StreamAggregate``) times the group's public size;
  the ratio of its MSE to the central one (expected >= 100x);
* **throughput and memory**: ``privstream sanitize`` over the whole file in file mode,
  with 3 aggregates (this histogram, a count by version, a mean latency by OS) on and
  off, best wall time of ``--rounds`` rounds and the peak RSS of that process (target
  >= 0.8x; ``--throughput-only`` measures only this).

Exit status 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.file_mode import Run, sanitize, timed  # noqa: E402
from bench.reference import Targets, print_environment  # noqa: E402

WINDOWS = 24
VERSIONS = [f"7.{i}" for i in range(20)]
OSES = ["ios", "android", "web"]
EPSILON = 1.0
BOUNDS = {"records_per_group": 2, "groups_per_subject": 1}
HISTOGRAM = {
    "name": "os_by_version",
    "query": "histogram",
    "field": "os",
    "group_by": [{"field": "version", "keys": VERSIONS}],
    "epsilon": EPSILON,
    "contribution": BOUNDS,
}
OTHERS = [
    {
        "name": "events_per_version",
        "query": "count",
        "group_by": [{"field": "version", "keys": VERSIONS}],
        "epsilon": 0.5,
        "contribution": {"records_per_group": 5, "groups_per_subject": 1},
    },
    {
        "name": "mean_latency",
        "query": "mean",
        "field": "latency_ms",
        "bounds": [0, 2000],
        "group_by": [{"field": "os"}],
        "epsilon": 0.5,
        "contribution": {"records_per_group": 3, "groups_per_subject": 1},
    },
]
FIELDS = [
    {"name": "user", "kind": "drop"},
    {"name": "hour", "kind": "public"},
    {"name": "version", "kind": "public"},
    {"name": "os", "kind": "categorical", "domain": OSES, "epsilon": EPSILON},
    {"name": "latency_ms", "kind": "real", "bounds": [0, 2000], "epsilon": 0.5},
]


def config(aggregates: list[dict[str, Any]]) -> dict[str, Any]:
    topics = {"input_topic": "raw", "output_topic": "out", "dead_letter_topic": "dlq"}
    privacy = {"epsilon": 8.0, "delta": 1e-5, "subject": "user"}
    return {"kafka": topics, "privacy": privacy, "fields": FIELDS, "aggregates": aggregates}


def write_events(path: Path, events: int, subjects: int) -> None:
    """One JSON object a line; each subject keeps one version and one OS."""
    rng = random.Random(34)
    version_of = [rng.choice(VERSIONS) for _ in range(subjects)]
    os_of = [rng.choices(OSES, weights=(5, 4, 1))[0] for _ in range(subjects)]
    with path.open("wb") as out:
        for _ in range(events):
            user = rng.randrange(subjects)
            event = {
                "user": f"u{user}",
                "hour": rng.randrange(WINDOWS),
                "version": version_of[user],
                "os": os_of[user],
                "latency_ms": round(min(rng.lognormvariate(5.0, 0.8), 5000.0), 1),
            }
            out.write(orjson.dumps(event) + b"\n")


def by_window(path: Path) -> list[list[dict[str, Any]]]:
    windows: list[list[dict[str, Any]]] = [[] for _ in range(WINDOWS)]
    with path.open("rb") as src:
        for line in src:
            record = orjson.loads(line)
            windows[record["hour"]].append(record)
    return windows


Cell = tuple[int, str, str]


def raw_counts(windows: list[list[dict[str, Any]]]) -> Counter[Cell]:
    return Counter((w, r["version"], r["os"]) for w, records in enumerate(windows) for r in records)


def central(
    windows: list[list[dict[str, Any]]], releases: int
) -> tuple[dict[Cell, list[float]], dict[Cell, int], float, float]:
    """privstream's releases per cell, the bounded counts, the coverage and the noise's MSE."""
    from privstream.aggregates import FreshCells, build_aggregates, release
    from privstream.config import parse_config

    (plan,) = build_aggregates(parse_config(config([HISTOGRAM])))
    noise = FreshCells()
    values: dict[Cell, list[float]] = defaultdict(list)
    bounded: dict[Cell, int] = {}
    covered = total = 0
    for w, records in enumerate(windows):
        accumulator = plan.accumulator(f"hour-{w}")
        accumulator.add_all(records)
        partial = accumulator.partial()
        for cell in plan.cells:
            bounded[(w, *cell)] = partial.counts.get(cell, 0)
        for _ in range(releases):
            for row in release(plan, partial, noise):
                key = (w, row["group"]["version"], row["group"]["os"])
                values[key].append(float(row["value"]))
                low, high = row["ci95"]
                covered += int(low <= bounded[key] <= high)
                total += 1
    expected = plan.query.totals[0].std_error ** 2
    return values, bounded, covered / total, expected


def pipelinedp(windows: list[list[dict[str, Any]]], runs: int) -> dict[Cell, list[float]]:
    """PipelineDP's counts per (window, version, os): Laplace, public partitions, same bounds."""
    import pipeline_dp

    records = [r for records in windows for r in records]
    partitions = [(w, v, o) for w in range(WINDOWS) for v in VERSIONS for o in OSES]
    values: dict[Cell, list[float]] = defaultdict(list)
    for _ in range(runs):
        accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=0.0)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
        params = pipeline_dp.AggregateParams(
            noise_kind=pipeline_dp.NoiseKind.LAPLACE,
            metrics=[pipeline_dp.Metrics.COUNT],
            max_partitions_contributed=BOUNDS["groups_per_subject"],
            max_contributions_per_partition=BOUNDS["records_per_group"],
        )
        extractors = pipeline_dp.DataExtractors(
            partition_extractor=lambda r: (r["hour"], r["version"], r["os"]),
            privacy_id_extractor=lambda r: (r["user"], r["hour"]),  # bounds per window
            value_extractor=lambda r: 0,
        )
        result = engine.aggregate(records, params, extractors, public_partitions=partitions)
        accountant.compute_budgets()
        for key, metrics in result:
            values[key].append(float(metrics.count))
    return values


def local_model(sanitized: Path) -> dict[Cell, float]:
    """Counts per (window, version, os) estimated from the randomized-response release."""
    from privstream.config import parse_config
    from privstream.estimate import Options, StreamAggregate
    from privstream.kinds import build_plan

    plan = build_plan(parse_config(config([])))
    groups: dict[tuple[int, str], StreamAggregate] = {}
    with sanitized.open("rb") as src:
        for line in src:
            record = orjson.loads(line)
            key = (record["hour"], record["version"])
            if key not in groups:
                groups[key] = StreamAggregate(plan, Options(), only=["os"])
            groups[key].add(line)
    estimates: dict[Cell, float] = {}
    for (w, version), aggregate in groups.items():
        aggregate.flush()
        (counted,) = aggregate.fields
        report = counted.report(Options(), None)
        for row in report["frequencies"]:
            estimates[(w, version, row["value"])] = row["estimate"] * aggregate.records
    return estimates


def mse(
    values: dict[Cell, list[float]], truth: dict[Cell, int] | Counter[Cell]
) -> tuple[float, float]:
    """The mean squared error over every (cell, release) and its standard error."""
    errors = np.array([(v - truth.get(c, 0)) ** 2 for c, vs in values.items() for v in vs])
    return float(errors.mean()), float(errors.std(ddof=1) / math.sqrt(len(errors)))


def throughput(work: Path, data: Path, events: int, rounds: int) -> dict[str, Run]:
    """Best wall time of ``privstream sanitize`` with the 3 aggregates on and off."""
    on = [*sanitize(work, config([HISTOGRAM, *OTHERS]), data, "on")]
    on += ["--aggregates-output", str(work / "on.aggregates.jsonl")]
    off = sanitize(work, config([]), data, "off")
    best: dict[str, Run] = {}
    for _ in range(rounds):
        for name, command in (("off", off), ("on", on)):
            run = timed(command)
            if name not in best or run.wall < best[name].wall:
                best[name] = run
    for name, run in best.items():
        print(
            f"sanitize, aggregates {name}: {events / run.wall:,.0f} events/s "
            f"({run.wall:.2f} s wall, {run.cpu:.2f} s CPU), peak RSS {run.rss_mb:.0f} MB"
        )
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 events, 10,000 subjects")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--subjects", type=int, default=100_000)
    parser.add_argument("--releases", type=int, default=20, help="privstream releases per window")
    parser.add_argument("--pipelinedp-runs", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2, help="sanitize rounds (best wall)")
    parser.add_argument(
        "--throughput-only", action="store_true", help="only sanitize, aggregates on vs off"
    )
    args = parser.parse_args()
    events = 100_000 if args.quick else args.events
    subjects = 10_000 if args.quick else args.subjects
    print_environment("pipeline_dp")
    print(f"# {events:,} events, {subjects:,} subjects, {WINDOWS} windows, 60 cells per window")
    targets = Targets()
    with tempfile.TemporaryDirectory(prefix="privstream-bench-aggregates-") as tmp:
        work = Path(tmp)
        data = work / "events.jsonl"
        write_events(data, events, subjects)
        runs = throughput(work, data, events, args.rounds)
        ratio = runs["off"].wall / runs["on"].wall
        print(f"throughput ratio on / off: {ratio:.3f}x")
        print(f"peak RSS on / off: {runs['on'].rss_mb:.0f} / {runs['off'].rss_mb:.0f} MB")
        targets.check("throughput aggregates on / off", ratio, 0.8)
        if not args.throughput_only:
            windows = by_window(data)
            truth = raw_counts(windows)
            ours, bounded, coverage, expected = central(windows, args.releases)
            theirs = pipelinedp(windows, args.pipelinedp_runs)
            local = local_model(work / "off.out.jsonl")
            report(targets, truth, bounded, ours, theirs, local, coverage, expected)
    raise SystemExit(targets.report())


def report(
    targets: Targets,
    truth: Counter[Cell],
    bounded: dict[Cell, int],
    ours: dict[Cell, list[float]],
    theirs: dict[Cell, list[float]],
    local: dict[Cell, float],
    coverage: float,
    expected: float,
) -> None:
    our_mse, our_se = mse(ours, truth)
    their_mse, their_se = mse(theirs, truth)
    local_mse, _ = mse({c: [v] for c, v in local.items()}, truth)
    noise_mse, _ = mse(ours, bounded)
    their_noise, _ = mse(theirs, bounded)
    ratio = our_mse / their_mse
    ratio_se = ratio * math.hypot(our_se / our_mse, their_se / their_mse)
    print(f"central MSE vs raw counts: privstream {our_mse:.2f} +- {our_se:.2f}, ", end="")
    print(
        f"PipelineDP {their_mse:.2f} +- {their_se:.2f}; vs bounded counts {noise_mse:.2f} ", end=""
    )
    print(f"(discrete Laplace variance {expected:.2f})")
    print(f"local model (randomized response + estimate) MSE: {local_mse:,.0f}")
    print(f"coverage of the 95% intervals: {coverage:.4f}")
    print(f"MSE ratio privstream / PipelineDP: {ratio:.3f} +- {ratio_se:.3f}")
    print(f"MSE ratio local / central: {local_mse / our_mse:,.0f}x", flush=True)
    # against the bounded counts: the noise alone, without the bounds' bias (the same in both)
    print(f"noise alone: privstream / PipelineDP {noise_mse / their_noise:.3f}, ", end="")
    print(f"local / central {local_mse / noise_mse:,.0f}x")
    targets.rows.append(
        (f"coverage {coverage:.4f} in [0.93, 0.97]", 0.93 <= coverage <= 0.97, True)
    )
    targets.at_most("MSE privstream / PipelineDP", ratio, 1.1, "x")
    targets.check("MSE local / central", local_mse / our_mse, 100.0)


if __name__ == "__main__":
    main()
