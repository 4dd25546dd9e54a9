"""A real Confluent-compatible Schema Registry for integration tests.

``schema_registry()`` yields a ``Registry`` (its ``url`` is what clients are
given), taken from the first of:

1. ``SCHEMA_REGISTRY_URL`` if set: used as is, nothing is started or stopped
   (``stop``/``start`` then refuse: the outage test needs a registry it owns);
2. the local launcher ``deploy/schema-registry/registry.sh`` (Apicurio
   Registry's distribution from Maven Central, no Docker) on a free port with a
   work dir of its own; stopped and its work dir deleted on exit.

Its schemas live in a file under the work dir: ``stop()`` then ``start()``
brings the same registry back, with the same ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

from aiokafka import ConsumerRecord

from tests.support.broker import REPO_ROOT, _free_ports
from tests.support.faults import readiness_becomes
from tests.support.worker_proc import Collector, WorkerProcess, produce, started, wait_while_alive

log = logging.getLogger(__name__)

LAUNCHER = REPO_ROOT / "deploy" / "schema-registry" / "registry.sh"
START_TIMEOUT_S = 120.0
# the first run fetches the distribution (about 160 MB) with Maven
LAUNCHER_TIMEOUT_S = START_TIMEOUT_S + 600.0
STOP_TIMEOUT_S = 60.0


@dataclass
class Registry:
    """A registry; ``url`` is its Confluent API root (``.../apis/ccompat/v7`` when local)."""

    url: str
    work_dir: str | None = None
    _env: dict[str, str] = field(default_factory=dict, repr=False)

    def start(self) -> None:
        self._run("start", LAUNCHER_TIMEOUT_S)

    def stop(self) -> None:
        """SIGTERM the registry (SIGKILL after the launcher's timeout); keep its schemas."""
        self._run("stop", STOP_TIMEOUT_S)

    def close(self) -> None:
        self.stop()
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def _run(self, command: str, timeout: float) -> None:
        if self.work_dir is None:
            raise RuntimeError(f"cannot {command} the registry at SCHEMA_REGISTRY_URL={self.url}")
        done = subprocess.run(
            ["bash", str(LAUNCHER), command],
            env=self._env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{LAUNCHER} {command} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}"
            )


@contextlib.contextmanager
def schema_registry() -> Iterator[Registry]:
    """Yield a running registry (see the module docstring)."""
    given = os.environ.get("SCHEMA_REGISTRY_URL", "").strip()
    if given:
        log.info("using SCHEMA_REGISTRY_URL=%s", given)
        yield Registry(given)
        return
    port, management_port = _free_ports()
    work_dir = tempfile.mkdtemp(prefix=f"privstream-registry-{port}-")
    env = {
        **os.environ,
        "REGISTRY_PORT": str(port),
        "REGISTRY_MANAGEMENT_PORT": str(management_port),
        "REGISTRY_WORK_DIR": work_dir,
        "REGISTRY_START_TIMEOUT": str(int(START_TIMEOUT_S)),
    }
    registry = Registry(f"http://127.0.0.1:{port}/apis/ccompat/v7", work_dir, env)
    try:
        log.info("starting the local schema registry on port %d (work dir %s)", port, work_dir)
        registry.start()
        yield registry
    finally:
        registry.close()


async def released_through_an_outage(
    bootstrap: str,
    server: Registry,
    topics: tuple[str, str],
    worker: WorkerProcess,
    port: int,
    batches: tuple[list[bytes], list[bytes]],
) -> list[ConsumerRecord]:
    """The framed-input outage scenario: the worker releases ``batches[0]`` (30 records),
    the registry stops, ``batches[1]`` (of a schema not yet fetched) arrives and the worker
    turns not ready without releasing it, the registry comes back (same schemas, same
    ids) and all 60 are released. ``topics``: input and output; the released records."""
    raw, output = topics
    first, second = batches
    await produce(bootstrap, raw, [(b"k", v, []) for v in first])
    async with started(worker), Collector(bootstrap, output) as out:
        await wait_while_alive(out, 30, worker, within_s=120)
        await readiness_becomes(port, 200, worker, within_s=30)
        await asyncio.to_thread(server.stop)
        try:
            await produce(bootstrap, raw, [(b"k", v, []) for v in second])
            await readiness_becomes(port, 503, worker, within_s=60)
            assert len(out.records) == 30, "a v2 record was released without its schema"
        finally:
            await asyncio.to_thread(server.start)  # same schemas, same ids
        await readiness_becomes(port, 200, worker, within_s=120)
        await wait_while_alive(out, 60, worker, within_s=120)
        assert await worker.terminate() == 0, worker.log_text()[-3000:]
    return list(out.records)
