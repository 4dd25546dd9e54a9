"""Build the C extensions with AddressSanitizer and UBSan into a separate directory.

``make csan`` runs this, then the extensions' tests against these builds (see
``tests/csan/sitecustomize.py``). The extensions and their flags are read from
pyproject.toml's ``[[tool.setuptools.ext-modules]]``, so a new extension is built here
without a change. Each module lands at ``OUT/<dotted name as a path><EXT_SUFFIX>``; the
in-place builds of ``make install`` are left alone.

Usage: python tests/csan/build.py OUT [CC]
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: -O1 keeps the stack traces readable; no recovery: the first report fails the run
SANITIZE = [
    "-O1",
    "-g",
    "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
]


def extensions() -> list[dict[str, list[str] | str]]:
    """pyproject.toml's extension modules (name, sources, include-dirs, compile args)."""
    with (ROOT / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)
    modules: list[dict[str, list[str] | str]] = project["tool"]["setuptools"]["ext-modules"]
    return modules


def build(out: Path, compiler: str) -> list[Path]:
    """Compile every extension into ``out``; the paths of the shared objects."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    python_include = sysconfig.get_path("include")
    built = []
    for module in extensions():
        name = str(module["name"])
        target = out / (name.replace(".", "/") + suffix)
        target.parent.mkdir(parents=True, exist_ok=True)
        includes = [f"-I{ROOT / d}" for d in module.get("include-dirs", [])]
        sources = [str(ROOT / s) for s in module["sources"]]
        command = [
            compiler,
            "-shared",
            "-fPIC",
            *SANITIZE,
            *module.get("extra-compile-args", []),
            f"-I{python_include}",
            *includes,
            *sources,
            "-o",
            str(target),
        ]
        subprocess.run(command, check=True)
        built.append(target)
    return built


def runtime(compiler: str) -> Path:
    """The compiler's ASan runtime (make csan preloads it); exits naming the package if
    the compiler has none (a bare name back from -print-file-name)."""
    found = subprocess.run(
        [compiler, "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not Path(found).is_absolute() or not Path(found).exists():
        sys.exit(
            f"{compiler} has no AddressSanitizer runtime (libasan.so); install it (Debian: "
            "libasan8, which gcc brings; Fedora: libasan) or set CSAN_CC to a compiler with one"
        )
    return Path(found)


def main() -> None:
    out = Path(sys.argv[1]).resolve()
    compiler = sys.argv[2] if len(sys.argv) > 2 else "gcc"
    print(f"ASan runtime: {runtime(compiler)}")
    for target in build(out, compiler):
        print(f"built {target}")


if __name__ == "__main__":
    main()
