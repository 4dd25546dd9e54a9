"""Proofs beside the code: every mechanism module links a proof page that names real code.

A privacy engineer reads ``docs/audit-guide.md``, then one page per
mechanism under ``docs/proofs/``; each step of a proof names the function it
proves as a dotted path in backticks. These checks keep the three in step:
every concrete mechanism's module links an existing page, its docstring
stays a summary, and every dotted name a page gives resolves to code.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import privstream.mechanisms as mechanisms_package
import pytest
from privstream.mechanisms.base import Mechanism

ROOT = Path(__file__).resolve().parents[2]
PROOFS = ROOT / "docs" / "proofs"
GUIDE = ROOT / "docs" / "audit-guide.md"
#: a module docstring keeps the claim, the calibration, the sampler contract and the link
DOCSTRING_LINES = 30
LINK = re.compile(r"docs/proofs/([a-z0-9-]+)\.md")
DOTTED = re.compile(r"`(privstream(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`")


def mechanism_modules() -> list[str]:
    """Modules of ``privstream.mechanisms`` that define a concrete ``Mechanism``."""
    found = []
    for info in pkgutil.iter_modules(mechanisms_package.__path__):
        module = importlib.import_module(f"privstream.mechanisms.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            concrete = issubclass(cls, Mechanism) and not inspect.isabstract(cls)
            if concrete and cls.__module__ == module.__name__:
                found.append(module.__name__)
                break
    return sorted(found)


def docstring(module_name: str) -> str:
    path = Path(importlib.import_module(module_name).__file__ or "")
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def resolve(dotted: str) -> object:
    """The object a dotted path names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute)
        return target
    raise ImportError(dotted)


def test_the_scan_finds_the_mechanisms() -> None:
    assert "privstream.mechanisms.laplace" in mechanism_modules()
    assert len(mechanism_modules()) >= 10


@pytest.mark.parametrize("module_name", mechanism_modules())
def test_every_mechanism_module_links_its_proof_and_stays_a_summary(module_name: str) -> None:
    text = docstring(module_name)
    links = LINK.findall(text)
    assert links, f"{module_name}: the docstring links no docs/proofs/<name>.md"
    for page in links:
        assert (PROOFS / f"{page}.md").is_file(), f"{module_name}: docs/proofs/{page}.md"
    lines = len(text.splitlines())
    assert lines <= DOCSTRING_LINES, f"{module_name}: {lines} docstring lines; move the proof"


@pytest.mark.parametrize("page", sorted(p.name for p in PROOFS.glob("*.md")))
def test_every_name_a_proof_gives_is_real_code(page: str) -> None:
    text = (PROOFS / page).read_text()
    names = DOTTED.findall(text)
    assert names, f"{page} names no function it proves"
    for name in names:
        resolve(name)  # raises for a name that is not there


def test_the_audit_guide_lists_every_proof_page() -> None:
    guide = GUIDE.read_text()
    for page in PROOFS.glob("*.md"):
        assert f"proofs/{page.name}" in guide, f"audit-guide.md does not list {page.name}"


def test_the_resolver_refuses_a_name_that_is_not_there() -> None:
    with pytest.raises(AttributeError):
        resolve("privstream.mechanisms.laplace.NoSuchThing")
