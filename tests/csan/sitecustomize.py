"""Load the sanitized builds of the C extensions in place of ``make install``'s.

``make csan`` puts this directory on PYTHONPATH, so every Python process of the run
(pytest and the subprocesses some tests start) imports it at start-up. It sends the
imports of the extensions listed in pyproject.toml to the builds under
``$PRIVSTREAM_CSAN_BUILD`` (``tests/csan/build.py``), and fails an import whose build is
missing rather than fall back to the unsanitized one.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
import tomllib
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

_ROOT = Path(__file__).resolve().parents[2]


class SanitizedExtensions(importlib.abc.MetaPathFinder):
    """Finds the extensions' sanitized shared objects, and nothing else."""

    def __init__(self, build: Path) -> None:
        with (_ROOT / "pyproject.toml").open("rb") as handle:
            modules = tomllib.load(handle)["tool"]["setuptools"]["ext-modules"]
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        self.paths = {m["name"]: build / (m["name"].replace(".", "/") + suffix) for m in modules}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        built = self.paths.get(fullname)
        if built is None:
            return None
        if not built.is_file():
            raise ImportError(f"{built} is missing: run make csan (tests/csan/build.py)")
        return importlib.util.spec_from_file_location(fullname, built)


if os.environ.get("PRIVSTREAM_CSAN_BUILD"):
    sys.meta_path.insert(0, SanitizedExtensions(Path(os.environ["PRIVSTREAM_CSAN_BUILD"])))
