"""The C extensions' build: one shared header for the buffer checks, found by every
build (editable install, sdist, wheel, make csan) and rebuilt on its change."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADER = "service/privstream/_buffer_checks.h"
MODULES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["ext-modules"]


def test_there_are_the_six_extensions() -> None:
    assert sorted(m["name"] for m in MODULES) == [
        "privstream.aggregates._bounds",
        "privstream.ledger._slots",
        "privstream.mechanisms._thresholds",
        "privstream.pipeline._columns",
        "privstream.worker._murmur2",
        "privstream.worker._records",
    ]


@pytest.mark.parametrize("module", MODULES, ids=[m["name"] for m in MODULES])
def test_each_extension_finds_and_depends_on_the_header(module: dict[str, list[str]]) -> None:
    (source,) = module["sources"]
    text = (ROOT / source).read_text()
    local = re.findall(r'^#include "([^"]+)"', text, re.M)
    assert local == ["_buffer_checks.h"]
    assert [str(Path(d) / local[0]) for d in module["include-dirs"]] == [HEADER]
    assert module["depends"] == [HEADER]


@pytest.mark.parametrize("module", MODULES, ids=[m["name"] for m in MODULES])
def test_no_extension_reads_a_buffer_format_itself(module: dict[str, list[str]]) -> None:
    """Format, item size and alignment are checked by the header's functions only: a
    copy in one extension is how the four first checks drifted apart."""
    text = (ROOT / module["sources"][0]).read_text()
    assert not re.search(r"(->|\.)format\b", text), "a format read outside the header"
    assert not re.search(r"\(uintptr_t\)\s*\w+(->|\.)buf", text), "an alignment test outside it"


def test_the_sdist_and_make_install_know_the_header() -> None:
    manifest = (ROOT / "MANIFEST.in").read_text().split("\n")
    assert f"include {HEADER}" in manifest
    makefile = (ROOT / "Makefile").read_text()
    sources = re.search(r"^C_SOURCES := (.*?)\n(?=\S)", makefile, re.M | re.S)
    assert sources is not None
    listed = set(sources.group(1).replace("\\", " ").split())
    assert listed == {HEADER} | {m["sources"][0] for m in MODULES}
