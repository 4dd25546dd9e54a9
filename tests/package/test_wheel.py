"""The package as a user gets it: ``python -m build``'s sdist and wheel, installed
into a fresh virtualenv and run from a directory outside the checkout.

``python -m build`` builds the sdist first and the wheel from the unpacked sdist, so a
file the C extensions need but the sdist lacks (the shared header) fails the wheel's
build here. The virtualenv has no pip of its own (the project's pip installs into it
with ``--python``, which saves the seconds ``ensurepip`` takes); its dependencies come
from the package index like any user's. ``make package-test`` runs this file alone, and
``make test`` runs it once through that target. About 20 s on an idle 2-core machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTENSIONS = (
    "privstream/ledger/_slots",
    "privstream/worker/_murmur2",
    "privstream/worker/_records",
    "privstream/pipeline/_columns",
    "privstream/mechanisms/_thresholds",
    "privstream/aggregates/_bounds",
)
HEADER = "service/privstream/_buffer_checks.h"
CONFIG = ROOT / "examples" / "telemetry.yaml"
RECORDS = 40
#: the released fields of examples/telemetry.yaml (device_id is dropped)
RELEASED = {"ts", "seq", "battery_temp_c", "session_minutes", "country", "crashed"}
COUNTRIES = {"US", "DE", "FR", "IN", "BR", "JP", "other"}


@dataclass(frozen=True)
class Installed:
    sdist: Path
    wheel: Path
    venv: Path
    workdir: Path  # outside the checkout: the cwd of every command


def _version() -> str:
    text = (ROOT / "service" / "privstream" / "__init__.py").read_text(encoding="utf-8")
    (version,) = re.findall(r'^__version__ = "([^"]+)"$', text, re.M)
    return version


def _clean_env() -> dict[str, str]:
    """The caller's environment without anything that would put the checkout on sys.path."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env.pop("VIRTUAL_ENV", None)
    return env


def _run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("package")
    dist = base / "dist"
    built = _run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], cwd=base)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    venv = base / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base)
    assert made.returncode == 0, made.stderr
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    install = _run([*pip, "install", "-q", "--no-compile", str(wheel)], cwd=base)
    assert install.returncode == 0, install.stderr[-3000:]
    workdir = base / "work"
    workdir.mkdir()
    yield Installed(sdist, wheel, venv, workdir)


def test_the_sdist_holds_the_sources_the_wheel_build_needs(installed: Installed) -> None:
    with tarfile.open(installed.sdist) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert HEADER in names  # MANIFEST.in
    assert {f"service/{e}.c" for e in EXTENSIONS} <= names
    assert not any(n.startswith(("tests/", "deploy/", ".venv/")) for n in names)


def test_the_wheel_has_the_five_compiled_extensions(installed: Installed) -> None:
    version = _version()
    assert installed.wheel.name.startswith(f"privstream-{version}-cp3")
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(f"privstream-{version}.dist-info/METADATA").decode()
    for extension in EXTENSIONS:
        assert any(re.fullmatch(rf"{extension}\.cpython-\d+-.*\.so", n) for n in names), extension
    assert f"Version: {version}" in metadata.splitlines()
    extras = set(re.findall(r"^Provides-Extra: (\S+)$", metadata, re.M))
    assert extras == {"plot", "protobuf", "json-schema", "bench", "dev"}
    assert re.search(r'^Requires-Dist: matplotlib\S*; extra == "plot"$', metadata, re.M)


def test_the_installed_package_is_imported_from_the_venv(installed: Installed) -> None:
    code = (
        "import importlib, json, privstream; "
        f"mods = [importlib.import_module(m.replace('/', '.')) for m in {list(EXTENSIONS)!r}]; "
        "print(json.dumps([privstream.__file__, *[m.__file__ for m in mods]]))"
    )
    done = _run([str(installed.venv / "bin" / "python"), "-c", code], cwd=installed.workdir)
    assert done.returncode == 0, done.stderr
    files = json.loads(done.stdout)
    assert len(files) == 1 + len(EXTENSIONS)
    site = installed.venv.resolve()
    for file in files:
        assert Path(file).resolve().is_relative_to(site), file  # not the checkout
        assert not Path(file).resolve().is_relative_to(ROOT), file


def test_version_comes_from_one_place(installed: Installed) -> None:
    done = _run([str(installed.venv / "bin" / "privstream"), "--version"], cwd=installed.workdir)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"privstream {_version()}"


def test_the_changelog_has_a_section_for_the_version() -> None:
    """The newest section is the packaged version's: a version bump opens a new one."""
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## (.+)$", changelog, re.M)
    assert sections, "CHANGELOG.md has no section"
    assert sections[0].split()[0] == _version(), sections[0]
    assert len(sections) == len(set(sections))


def test_explain_from_the_install(installed: Installed) -> None:
    config = installed.workdir / "telemetry.yaml"
    config.write_text(CONFIG.read_text(encoding="utf-8"), encoding="utf-8")
    done = _run(
        [str(installed.venv / "bin" / "privstream"), "explain", "--config", config.name],
        cwd=installed.workdir,
    )
    assert done.returncode == 0, done.stderr
    for field in RELEASED - {"ts", "seq"}:
        assert re.search(rf"^{field}\s", done.stdout, re.M), field


def test_sanitize_from_the_install(installed: Installed) -> None:
    workdir = installed.workdir
    (workdir / "telemetry.yaml").write_text(CONFIG.read_text(encoding="utf-8"), encoding="utf-8")
    raw = [
        {
            "device_id": f"dev-{i:04d}",
            "ts": 1732406400 + i,
            "seq": i,
            "battery_temp_c": 20.0 + i % 30,
            "session_minutes": float(i % 200),
            "country": ["US", "DE", "FR", "IN"][i % 4],
            "crashed": i % 7 == 0,
        }
        for i in range(RECORDS)
    ]
    (workdir / "raw.jsonl").write_text("".join(json.dumps(r) + "\n" for r in raw))
    done = _run(
        [
            str(installed.venv / "bin" / "privstream"),
            "sanitize",
            "--config",
            "telemetry.yaml",
            "--input",
            "raw.jsonl",
            "--output",
            "out.jsonl",
        ],
        cwd=workdir,
    )
    assert done.returncode == 0, done.stderr
    assert f"{RECORDS} records in, {RECORDS} sanitized" in done.stderr
    out = [json.loads(line) for line in (workdir / "out.jsonl").read_text().splitlines()]
    assert len(out) == RECORDS
    for record, source in zip(out, raw, strict=True):
        assert set(record) == RELEASED  # device_id dropped
        assert (record["ts"], record["seq"]) == (source["ts"], source["seq"])  # public
        assert record["country"] in COUNTRIES
        assert isinstance(record["crashed"], bool)
    assert not any("dev-" in line for line in (workdir / "out.jsonl").read_text().splitlines())
    metadata = json.loads((workdir / "out.jsonl.privstream.json").read_text())
    assert metadata["privstream_version"] == _version()
    assert not (workdir / "privstream-dead-letters.jsonl").exists()
