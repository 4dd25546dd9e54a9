"""Worker memory over a long run: RSS stays flat and under 300 MB.

Pre-loads 2,000,000 reference records (``--quick``: 200,000) into a
4-partition topic, runs one `privstream run` over all of it and samples the
worker's RSS (psutil) against the records it has committed. Reports the peak
RSS and the slope of RSS over the second half of the run (MB per million
records, least squares; a leak shows as a steady positive slope).

Targets: peak RSS < 300 MB; slope < 5 MB per million records.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kafka import Worker, admin, broker, committed, new_topics, preload, write_config
from bench.reference import Targets, print_environment

PEAK_MB = 300.0
SLOPE_MB_PER_M = 5.0


async def run(args: argparse.Namespace) -> int:
    total = 200_000 if args.quick else args.records
    with broker() as bootstrap, tempfile.TemporaryDirectory(prefix="privstream-bench-") as tmp:
        workdir = Path(tmp)
        topics = await new_topics(bootstrap, "memory")
        rate = await preload(bootstrap, topics.raw, total)
        print(f"pre-loaded {total:,} records ({rate:,.0f} records/s)")
        config = write_config(workdir / "memory.yaml", bootstrap, topics, max_batch_records=10_000)
        worker = Worker(config, workdir, "memory-0", passthrough=False)
        process = psutil.Process(worker.proc.pid)
        samples: list[tuple[int, float]] = []
        started = time.perf_counter()
        try:
            async with admin(bootstrap) as client:
                while True:
                    done = await committed(client, topics.group)
                    rss = process.memory_info().rss / 2**20
                    samples.append((done, rss))
                    if done >= total:
                        break
                    if worker.proc.poll() is not None:
                        raise RuntimeError(f"worker exited early; see {worker.log}")
                    if time.perf_counter() - started > 3600:
                        raise TimeoutError(f"only {done:,} of {total:,} records committed")
                    await asyncio.sleep(0.5)
        finally:
            worker.stop()
    done_counts = np.array([d for d, _ in samples], dtype=np.float64)
    rss_mb = np.array([r for _, r in samples])
    half = done_counts >= total / 2
    slope = float(np.polyfit(done_counts[half] / 1e6, rss_mb[half], 1)[0]) if half.sum() > 2 else 0
    peak = float(rss_mb.max())
    middle = rss_mb[half][0]
    print(f"RSS: start {rss_mb[0]:.0f} MB, at 50% {middle:.0f} MB, end {rss_mb[-1]:.0f} MB")
    print(f"peak {peak:.0f} MB; slope over the second half {slope:+.2f} MB per million records")
    targets = Targets()
    targets.at_most("peak RSS", peak, PEAK_MB, "MB")
    targets.at_most("RSS slope, second half", slope, SLOPE_MB_PER_M, "MB per million records")
    return targets.report()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200,000 records: a smoke run")
    parser.add_argument("--records", type=int, default=2_000_000)
    args = parser.parse_args()
    print_environment("aiokafka", "psutil")
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
