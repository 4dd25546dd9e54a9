"""Fail unless every C extension imports from the sanitized builds (make csan).

Run with the environment of the csan tests: it shows that the redirection of
``tests/csan/sitecustomize.py`` took, so a passing run cannot have tested the
unsanitized builds instead.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from sitecustomize import SanitizedExtensions


def main() -> None:
    build = Path(os.environ["PRIVSTREAM_CSAN_BUILD"])
    for name in SanitizedExtensions(build).paths:
        where = Path(importlib.import_module(name).__file__ or "")
        if build not in where.parents:
            sys.exit(f"{name} was imported from {where}, not from {build}")
        print(f"{name}: {where}")


if __name__ == "__main__":
    main()
