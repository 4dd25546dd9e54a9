"""What ``privstream sanitize`` imports: only what file mode needs (start-up time).

A fresh interpreter runs the real entry point on an empty file, then lists the
modules it loaded. The Kafka client, the metrics exporter, the worker, the
audit, the estimators and the structured kinds' handlers belong to other
commands or other configs: each costs start-up time on every file run
(prometheus_client alone about 20 ms; audit and estimate about 10 ms, reached
through the field-kind registry until their parts were deferred).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: a config like the reference one: a declared laplace (the auto comparison warns), an
#: auto real, an integer, a categorical with randomized response, a boolean
CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 6}
fields:
  - {name: device_id, kind: drop}
  - {name: ts, kind: public}
  - {name: temp_c, kind: real, bounds: [-20, 60], mechanism: laplace, epsilon: 1}
  - {name: load_pct, kind: real, bounds: [0, 100], epsilon: 1}
  - {name: events, kind: integer, bounds: [0, 100], epsilon: 1}
  - {name: network, kind: categorical, domain: [wifi, cellular], epsilon: 1}
  - {name: charging, kind: boolean, epsilon: 1}
"""

#: module prefixes that sanitize must not import
FORBIDDEN = (
    "aiokafka",
    "asyncio",
    "prometheus_client",
    "http.server",
    "scipy",
    "matplotlib",
    "privstream.worker",
    "privstream.metrics",
    "privstream.canary_metrics",
    "privstream.clamped_counts",
    "privstream.ledger",
    "privstream.audit",
    "privstream.estimate",
    "privstream.pipeline.structured",
    "privstream.cli.run",
    "privstream.cli.audit",
    "privstream.cli.estimate",
)

SCRIPT = """
import json, sys
from privstream.cli.main import main
status = main(sys.argv[1:])
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def _loaded(tmp_path: Path) -> list[str]:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    args = ["sanitize", "--config", str(config), "--input", str(empty)]
    args += ["--output", str(tmp_path / "out.jsonl"), "--dead-letter", str(tmp_path / "dl.jsonl")]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, check=True
    )
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["status"] == 0, done.stderr
    # the run got as far as the declared-mechanism comparison
    assert "temp_c: laplace has up to" in done.stderr
    modules: list[str] = report["modules"]
    return modules


def test_sanitize_imports_nothing_of_the_other_commands(tmp_path: Path) -> None:
    modules = _loaded(tmp_path)
    loaded = [m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert loaded == []
    # the registry and the pipeline are there: the check above is not vacuous
    assert "privstream.kinds.scalar" in modules
    assert "privstream.pipeline.batch" in modules


OWN_SCRIPT = """
import json, sys
from privstream.cli.main import main
sys.argv = ["privstream", *sys.argv[1:]]
status = main()
plugins = list(sys.modules["pydantic.plugin._loader"].get_plugins())
print(json.dumps({"status": status, "modules": sorted(sys.modules), "plugins": plugins}))
"""


def test_sanitize_as_the_process_loads_no_pydantic_plugins(tmp_path: Path) -> None:
    """The entry point's own process never imports importlib.metadata (pydantic's plugin
    lookup: about 20 ms of every start-up) and still validates the config."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    data = tmp_path / "in.jsonl"
    data.write_bytes(
        b'{"ts": 1, "temp_c": 3.5, "load_pct": 1, "events": 2, "network": "wifi", '
        b'"charging": true}\n'
    )
    out = tmp_path / "out.jsonl"
    args = ["sanitize", "--config", str(config), "--input", str(data), "--output", str(out)]
    args += ["--dead-letter", str(tmp_path / "dl.jsonl")]
    done = subprocess.run(
        [sys.executable, "-c", OWN_SCRIPT, *args], capture_output=True, text=True, check=True
    )
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["status"] == 0, done.stderr
    assert report["plugins"] == []
    assert not [m for m in report["modules"] if m.startswith(("importlib.metadata", "email"))]
    assert len(out.read_bytes().splitlines()) == 1
    # a config error is still found and reported by pydantic
    config.write_text(CONFIG.replace("epsilon: 6", "epsilon: -6"))
    failed = subprocess.run(
        [sys.executable, "-c", OWN_SCRIPT, *args], capture_output=True, text=True
    )
    assert failed.returncode == 2
    assert "privacy.epsilon" in failed.stderr


def test_main_called_with_argv_leaves_pydantic_plugins_alone() -> None:
    """Tests and embedding programs keep pydantic's own plugin loader."""
    probe = (
        "import sys; from privstream.cli.main import main; main(['keygen']); "
        "import pydantic.plugin._loader as loader; print(loader.__file__ is not None)"
    )
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert ran.stdout.split()[-1] == "True"


def test_blas_gets_one_thread_before_numpy_loads_unless_the_environment_says() -> None:
    """OpenBLAS reads its thread count when numpy loads: the cli package sets it first."""
    probe = (
        "import os, sys; import privstream.cli; loaded = 'numpy' in sys.modules; "
        "import privstream.cli.main; print(loaded, os.environ['OPENBLAS_NUM_THREADS'])"
    )
    variables = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    clean = {k: v for k, v in os.environ.items() if k not in variables}
    for preset, expected in ((None, "False 1"), ("3", "False 3")):
        env = clean if preset is None else {**clean, "OPENBLAS_NUM_THREADS": preset}
        ran = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
        )
        assert ran.stdout.split() == expected.split(), ran.stderr


GC_SCRIPT = """
import gc, json, sys
from privstream.cli.main import main
own = sys.argv[1].startswith("own")
if sys.argv[1] == "own-off":  # a caller that runs with the collector off
    gc.disable()
sys.argv = ["privstream", *sys.argv[2:]]
try:
    status = main() if own else main(sys.argv[1:])
except SystemExit as exc:  # a config error leaves ``main`` this way
    status = exc.code
print(json.dumps({"status": status, "frozen": gc.get_freeze_count(), "on": gc.isenabled()}))
"""


def _gc_after(tmp_path: Path, how: str, command: str) -> dict[str, int]:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    args = [command, "--config", str(config)]
    if command == "sanitize":
        args += ["--input", str(empty), "--output", str(tmp_path / f"{how}.jsonl")]
        args += ["--dead-letter", str(tmp_path / f"{how}.dl.jsonl")]
    done = subprocess.run(
        [sys.executable, "-c", GC_SCRIPT, how, *args], capture_output=True, text=True, check=True
    )
    report: dict[str, int] = json.loads(done.stdout.splitlines()[-1])
    assert report["status"] == 0, done.stderr
    return report


def test_sanitize_as_the_process_freezes_what_start_up_made(tmp_path: Path) -> None:
    """The collector never scans start-up's objects again in a file run (cli/main.py)."""
    report = _gc_after(tmp_path, "own", "sanitize")
    # numpy, pydantic and the config models alone leave tens of thousands of objects
    assert report["frozen"] > 20_000
    assert report["on"]


@pytest.mark.parametrize(("how", "command"), [("embedded", "sanitize"), ("own", "explain")])
def test_main_called_with_argv_or_another_command_freezes_nothing(
    tmp_path: Path, how: str, command: str
) -> None:
    report = _gc_after(tmp_path, how, command)
    assert report["frozen"] == 0
    assert report["on"]


@pytest.mark.parametrize("command", ["sanitize", "explain"])
def test_a_caller_that_turned_the_collector_off_keeps_it_off(tmp_path: Path, command: str) -> None:
    """``main()`` without ``argv`` in a process whose collector is off (a caller's choice,
    e.g. a benchmark harness): it neither turns the collector on nor freezes the caller's
    objects."""
    report = _gc_after(tmp_path, "own-off", command)
    assert report["on"] is False
    assert report["frozen"] == 0


@pytest.mark.parametrize("command", ["sanitize", "run"])
def test_a_start_up_that_fails_leaves_the_collector_on(tmp_path: Path, command: str) -> None:
    """The collector is paused during start-up: a config error (exit 2, before any
    ``_startup_done``) must not leave it paused for the rest of the process."""
    config = tmp_path / "bad.yaml"
    config.write_text("privacy: {epsilon: -1}\n")
    args = [command, "--config", str(config)]
    if command == "sanitize":
        args += ["--input", str(config), "--dead-letter", str(tmp_path / "dl.jsonl")]
    done = subprocess.run(
        [sys.executable, "-c", GC_SCRIPT, "own", *args], capture_output=True, text=True
    )
    report = json.loads(done.stdout.splitlines()[-1])
    assert report == {"status": 2, "frozen": 0, "on": True}, done.stderr
