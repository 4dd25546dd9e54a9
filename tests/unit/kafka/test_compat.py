"""aiokafka's internals are reached through one module that refuses an unchecked version."""

from __future__ import annotations

import ast
from pathlib import Path

import aiokafka
import pytest
from privstream.errors import MisuseError
from privstream.kafka.compat import check_version

SERVICE = Path(__file__).resolve().parents[3] / "service" / "privstream"
#: aiokafka's public modules, importable anywhere
PUBLIC = {"aiokafka", "aiokafka.errors", "aiokafka.admin", "aiokafka.structs"}


@pytest.mark.parametrize("version", ["0.14", "0.14.0", "0.14.3"])
def test_a_checked_version_loads(version: str) -> None:
    check_version(version)


@pytest.mark.parametrize("version", ["0.15.0", "0.13.1", "1.0.0", "0.140.0"])
def test_an_unchecked_version_is_refused_with_the_fix(version: str) -> None:
    with pytest.raises(MisuseError, match=rf"aiokafka {version} is installed.*<0.15"):
        check_version(version)


def test_the_installed_version_is_checked() -> None:
    check_version(aiokafka.__version__)


def test_no_module_but_compat_imports_aiokafka_internals() -> None:
    offenders = []
    for path in SERVICE.rglob("*.py"):
        if path.name == "compat.py" and path.parent.name == "kafka":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            offenders += [
                f"{path.relative_to(SERVICE)}: {name}"
                for name in names
                if name.startswith("aiokafka") and name not in PUBLIC
            ]
    assert not offenders, offenders
