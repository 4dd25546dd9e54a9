"""A real Prometheus scrapes a running worker and evaluates deploy/prometheus/rules.yml.

Debian's ``prometheus`` (``make system-deps``) runs on 127.0.0.1 with a 1 s
scrape and rule interval; everything is asserted through its HTTP API, as a
dashboard or an alert would see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from privstream.config import load_config
from privstream.kinds import build_plan
from privstream.mechanisms import LaplaceMechanism, RandomizedResponse
from privstream.mechanisms.base import Mechanism
from privstream.mechanisms.integer_laplace import IntegerLaplaceMechanism

from tests.support.broker import create_topics
from tests.support.faults import poll_until
from tests.support.worker_proc import (
    ROOT,
    Message,
    WorkerProcess,
    produce,
    unique_topics,
    write_config,
)

RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
#: records streamed, in two halves (see the windowed check below)
N = 20_000
HALF = N // 2
#: canary draws per field and batch: at most 2000 records a batch (kafka.max_batch_records),
#: so each half is at least 5 batches, at least 5000 canary draws per field
CANARIES = 1000
#: standard deviations of the sampling error allowed in every statistical check
K = 5.0

BODY = {
    "privacy": {"epsilon": 4.0},
    "fields": [
        {"name": "seq", "kind": "public"},
        {
            "name": "amount",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": [0, 100],
            "epsilon": 1.0,
        },
        {"name": "clicks", "kind": "integer", "bounds": [0, 20], "epsilon": 1.0},
        {"name": "tier", "kind": "categorical", "domain": ["a", "b", "c"], "epsilon": 1.0},
        {"name": "opted_in", "kind": "boolean", "epsilon": 0.5},
    ],
    "metrics": {"canaries": CANARIES, "canary_interval_seconds": 0},
}
NOISED = ("amount", "clicks", "tier", "opted_in")


def free_ports(count: int) -> list[int]:
    """Distinct free ports on 127.0.0.1 (all bound at once, so never the same twice)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def records(start: int, count: int, rng: random.Random) -> list[Message]:
    """Valid records; a tenth of amounts and clicks outside the bounds (clamped, no matter:
    the error metrics come from canary draws, which never see a record)."""
    return [
        (
            None,
            json.dumps(
                {
                    "seq": i,
                    "amount": rng.uniform(-10, 110),
                    "clicks": rng.randint(0, 22),
                    "tier": rng.choice("abc"),
                    "opted_in": rng.random() < 0.3,
                }
            ).encode(),
            [],
        )
        for i in range(start, start + count)
    ]


# --- the statistics --------------------------------------------------------------------


def error_moments(mech: Mechanism) -> tuple[float, float]:
    """Mean and variance of one canary error ``rho(Y, d)`` of a correct mechanism.

    Laplace: ``g |Z|``, Z discrete Laplace on the grid (the reported expected error
    adds the worst-case rounding offset ``g P(Z=0)/2``, which the canary error,
    measured from the value on the grid, does not contain). Integer: ``|Z|``.
    Randomized response: the flip indicator, mean ``m p``.
    """
    if isinstance(mech, LaplaceMechanism):
        assert mech.noise is not None
        g, z = mech.granularity, mech.noise
        return g * z.mean_abs, g * g * (z.variance - z.mean_abs**2)
    if isinstance(mech, IntegerLaplaceMechanism):
        assert mech.noise is not None
        z = mech.noise
        return z.mean_abs, z.variance - z.mean_abs**2
    assert isinstance(mech, RandomizedResponse)
    flip = mech.expected_error
    return flip, flip * (1.0 - flip)


def check_mean(name: str, observed: float, mech: Mechanism, n: int, what: str) -> float:
    """|observed - expected| / expected <= tolerance, the tolerance from the sample size.

    The tolerance is ``(K sd + bias) / expected``: ``sd = sqrt(Var / n)`` the standard
    deviation of a mean of ``n`` errors (relative sd about ``1/sqrt(n)`` for the
    Laplace kinds, ``sqrt((1 - p) / (p n))`` for a flip rate ``p``), ``bias`` the
    rounding offset that ``expected_error`` adds as a worst case (observed <=
    expected up to sampling error). Returns sd.
    """
    mean, var = error_moments(mech)
    expected = mech.expected_error
    sd = math.sqrt(var / n)
    tolerance = (K * sd + (expected - mean)) / expected
    assert tolerance < 0.1, f"{name}: a {tolerance:.1%} band would test little"
    relative = abs(observed - expected) / expected
    assert relative <= tolerance, (
        f"{name} ({what}): observed mean error {observed:.6g} is {relative:.2%} from the "
        f"expected {expected:.6g}, beyond the {tolerance:.2%} that {n} draws allow"
    )
    return sd


# --- Prometheus --------------------------------------------------------------------------


def _get(port: int, path: str, params: dict[str, str] | None = None) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    url = f"http://127.0.0.1:{port}{path}{query}"
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]


def _timestamp(text: str) -> float:
    """RFC 3339 with nanoseconds (Prometheus) as a Unix time; microseconds suffice."""
    head, _, rest = text.rstrip("Z").partition(".")
    fraction = "".join(c for c in rest if c.isdigit())[:6]
    return datetime.fromisoformat(f"{head}.{fraction or '0'}+00:00").timestamp()


class Prometheus:
    """``prometheus`` on 127.0.0.1 scraping one target as job ``privstream``."""

    def __init__(self, tmp: Path, target_port: int, port: int) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail(
                "prometheus is not installed: `make system-deps` installs it "
                "(Debian package prometheus)"
            )
        self.port = port
        self.config = tmp / "prometheus.yml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "global": {
                        "scrape_interval": "1s",
                        "scrape_timeout": "1s",
                        "evaluation_interval": "1s",
                    },
                    "rule_files": [str(RULES)],
                    "scrape_configs": [
                        {
                            "job_name": "privstream",
                            "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}],
                        }
                    ],
                }
            )
        )
        self.log = tmp / "prometheus.log"
        self._argv = [
            binary,
            f"--config.file={self.config}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    @contextlib.contextmanager
    def running(self) -> Iterator[Prometheus]:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(self._argv, stdout=log, stderr=subprocess.STDOUT)
            try:
                yield self
            finally:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])

    async def api(self, path: str, **params: str) -> Any:
        return await asyncio.to_thread(_get, self.port, f"/api/v1/{path}", params)

    async def query(self, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Instant query: value by label set (``__name__`` left out)."""
        data = await self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return {
            tuple(sorted((k, v) for k, v in r["metric"].items() if k != "__name__")): float(
                r["value"][1]
            )
            for r in data["result"]
        }

    async def by_field(self, expr: str) -> dict[str, float]:
        return {dict(labels)["field"]: value for labels, value in (await self.query(expr)).items()}

    async def ready(self) -> bool:
        def probe() -> bool:
            url = f"http://127.0.0.1:{self.port}/-/ready"
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        assert self.proc is not None
        assert self.proc.poll() is None, f"prometheus exited:\n{self.log_tail()}"
        return await asyncio.to_thread(probe)


async def test_prometheus_sees_canary_error_near_expected_and_above_gamma(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Per field, Prometheus's mean canary error is within a sample-size tolerance of
    the expected error and not below the gamma bound; the rules load and evaluate.

    The worker draws ``CANARIES`` shadow releases per field after every batch; n is
    their number as Prometheus counts it (at least 10,000 for 20,000 records).
    Tolerance: a canary error is a function of its own noise alone, so the mean of n
    errors has standard deviation ``sd = sqrt(Var / n)``: about ``expected / sqrt(n)``
    for Laplace (``g |Z|`` has sd ~ the scale) and the integer field,
    ``sqrt(p (1 - p) / n)`` for randomized response's flip rate ``p``. Each check
    allows ``K = 5`` sd (plus the worst-case rounding offset that ``expected_error``
    includes): at n = 10,000 that is 5% for Laplace and the integer, 5.8% for the
    categorical, 6.4% for the boolean. Gamma: ``observed >= gamma`` exactly for the
    Laplace and integer fields (their gamma is far below their error); randomized
    response is optimal, its expected error *is* gamma, so its observed mean lies
    below gamma half the time and is only required to be within K sd of it.
    The windowed mean of the rules is checked the same way with the first half's n.
    Each check fails on a correct mechanism with probability at most 5.7e-7
    (two-sided normal tail at 5 sd); the 12 checks together less than 1e-5.

    The worker exports each measured field's histogram from its start, at zero: a
    series that appears only with its first batch would make Prometheus extrapolate
    its ``_sum`` and ``_count`` to the window's start by different amounts (by how
    much of each the first sample holds), and on a window a few scrapes long that
    biases the rules' ratio by several percent.
    """
    kafka = unique_topics("prom")
    await create_topics(kafka_bootstrap, list(kafka.values())[:3], partitions=2)
    worker_port, prometheus_port = free_ports(2)
    config = write_config(
        tmp_path / "worker.yaml",
        kafka_bootstrap,
        kafka,
        {**BODY, "http": {"host": "127.0.0.1", "port": worker_port}},
    )
    mechanisms = {h.name: h.mechanism for h in build_plan(load_config(config)).handlers}
    rng = random.Random(5)
    worker = WorkerProcess(config, tmp_path / "worker.log", log_level="INFO")
    prometheus = Prometheus(tmp_path, worker_port, prometheus_port)

    def logs() -> str:
        return f"prometheus log:\n{prometheus.log_tail()}\nworker log tail:\n" + "\n".join(
            worker.log_text().splitlines()[-20:]
        )

    async def scraped(total: int) -> float | None:
        """The canary draws per field in a scrape where the worker had processed ``total``
        records (the two are updated together, after each commit); None before."""
        seen = await prometheus.query("privstream_records_in_total")
        counts = await prometheus.by_field("privstream_field_canary_error_count")
        if list(seen.values()) != [total] or set(counts) != set(NOISED):
            return None
        [n] = set(counts.values())  # every measured field: CANARIES per batch
        assert n % CANARIES == 0 and n >= total / 2000 * CANARIES, counts
        return n

    await worker.start()
    try:
        with prometheus.running():
            await poll_until(prometheus.ready, 30, "prometheus ready", every_s=0.2, why=logs)

            async def target_up() -> dict[str, Any] | None:
                targets = (await prometheus.api("targets"))["activeTargets"]
                up = [t for t in targets if t["health"] == "up"]
                return up[0] if len(targets) == 1 and up else None

            target = await poll_until(target_up, 30, "the worker target up", every_s=0.2, why=logs)
            assert target["labels"]["job"] == "privstream"
            assert target["scrapeUrl"] == f"http://127.0.0.1:{worker_port}/metrics"
            assert target["lastError"] == ""

            # two halves: Prometheus scrapes the first complete before the second is
            # sent, so the 15 minute window of the rules holds >= n_half canary draws
            # the histograms exist from the worker's start, at zero (see above)
            zero = await prometheus.by_field("privstream_field_canary_error_count")
            assert zero == dict.fromkeys(NOISED, 0.0)
            await produce(kafka_bootstrap, kafka["input_topic"], records(0, HALF, rng))
            n_half = await poll_until(
                lambda: scraped(HALF), 60, f"{HALF} records scraped", every_s=0.2, why=logs
            )
            await produce(kafka_bootstrap, kafka["input_topic"], records(HALF, HALF, rng))
            n = await poll_until(
                lambda: scraped(N), 60, f"{N} records scraped", every_s=0.2, why=logs
            )
            complete = time.time()

            async def evaluated_after_complete() -> list[dict[str, Any]] | None:
                groups: list[dict[str, Any]] = (await prometheus.api("rules"))["groups"]
                if not groups or min(_timestamp(g["lastEvaluation"]) for g in groups) <= complete:
                    return None
                return groups

            groups = await poll_until(
                evaluated_after_complete,
                30,
                "rules evaluated on the final scrape",
                every_s=0.2,
                why=logs,
            )

            observed = await prometheus.by_field("privstream_field_canary_error_mean")
            expected = await prometheus.by_field("privstream_field_expected_error")
            gamma = await prometheus.by_field("privstream_field_gamma_lower_bound")
            ratio = await prometheus.by_field("privstream_field_canary_error_ratio_to_gamma")
            windowed = await prometheus.by_field("privstream:field_canary_error:mean15m")
            window_n = await prometheus.by_field("privstream:field_canary_error:count15m")
            totals = await prometheus.query("sum(privstream_records_out_total)")
            dead = await prometheus.query("sum(privstream_records_dead_lettered_total)")
            share = await prometheus.query("privstream:records_dead_lettered:share5m")
            active = (await prometheus.api("alerts"))["alerts"]
    finally:
        if worker.alive:
            assert await worker.terminate() == 0, worker.log_text()

    # the rules loaded from the repository file and evaluate without error
    assert {group["file"] for group in groups} == {str(RULES)}
    loaded = [rule for group in groups for rule in group["rules"]]
    assert len(loaded) == sum(len(g["rules"]) for g in yaml.safe_load(RULES.read_text())["groups"])
    names = {rule["name"] for rule in loaded}
    assert {"PrivstreamObservedErrorDrift", "PrivstreamErrorBelowGammaBound"} <= names
    assert "privstream:field_canary_error:mean15m" in names
    bad = {rule["name"]: rule.get("lastError") for rule in loaded if rule["health"] != "ok"}
    assert not bad, f"rules not healthy: {bad}"
    # a healthy worker under a correct mechanism: no alert even pending
    assert [a["labels"]["alertname"] for a in active] == []

    assert list(totals.values()) == [N]
    assert list(dead.values()) == [0.0]  # no dead letter (no reason label by default)
    assert share == {(("job", "privstream"),): 0.0}  # the share sanitize bounds: none

    assert set(observed) == set(expected) == set(gamma) == set(NOISED)
    for name in NOISED:
        mech = mechanisms[name]
        assert mech is not None
        assert expected[name] == mech.expected_error
        assert gamma[name] == mech.gamma_lower_bound
        sd = check_mean(name, observed[name], mech, int(n), "since start")
        if gamma[name] < mech.expected_error - 2 * K * sd:
            assert observed[name] >= gamma[name], f"{name}: observed error below gamma"
        else:  # randomized response: expected error == gamma
            assert observed[name] >= gamma[name] - K * sd, (
                f"{name}: observed {observed[name]:.6g} is more than {K} sd below gamma"
                f" {gamma[name]:.6g}"
            )
        assert ratio[name] == pytest.approx(observed[name] / gamma[name], rel=1e-12)
        # the rules' windowed mean: at least the first half's canaries, the same band
        assert window_n[name] >= n_half
        check_mean(name, windowed[name], mech, int(n_half), "rules' 15m window")
