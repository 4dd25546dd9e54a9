"""Tests drive the worker through its seams, never its private attributes (issue 31).

A ``Worker`` is built with what a test needs to see or replace (its metrics,
health, ledger, sanitizer, ``FencingJudge``) and driven through its public
methods (``pipeline``, ``probe``, ``recover``, ``listener``); the ledger's
steps are ``worker/charging.py``'s functions. This reads every test file's
syntax tree and fails on ``name._attr`` where ``name`` holds a Worker: bound
by ``Worker(...)`` or by a test helper annotated to return one (alone or in a
tuple), or a parameter annotated ``Worker``; and on ``helper()._attr``.
Names are tracked per file, not per scope: a name that holds a Worker in one
test should not hold something else's privates in another.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

TESTS = Path(__file__).parents[1]
WORKER = {"Worker", "loop.Worker"}
#: a helper's name -> the positions of the Worker in the tuple it returns; None: a Worker
Helpers = dict[str, tuple[int, ...] | None]


def helpers(trees: Iterable[ast.Module]) -> Helpers:
    """The functions annotated to return a Worker, or a tuple holding one."""
    found: Helpers = {"Worker": None, "loop.Worker": None}
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or not node.returns:
                continue
            if ast.unparse(node.returns) in WORKER:
                found[node.name] = None
            elif isinstance(node.returns, ast.Subscript) and isinstance(
                node.returns.slice, ast.Tuple
            ):
                elements = [ast.unparse(e) for e in node.returns.slice.elts]
                positions = tuple(i for i, e in enumerate(elements) if e in WORKER)
                if positions:
                    found[node.name] = positions
    return found


def _called(value: ast.expr, known: Helpers) -> str | None:
    if isinstance(value, ast.Call) and ast.unparse(value.func) in known:
        return ast.unparse(value.func)
    return None


def _bound(target: ast.expr, value: ast.expr, known: Helpers) -> set[str]:
    """The names ``target = value`` binds to a Worker."""
    if isinstance(target, ast.Name):
        helper = _called(value, known)
        return {target.id} if helper is not None and known[helper] is None else set()
    if not isinstance(target, ast.Tuple):
        return set()
    if isinstance(value, ast.Tuple) and len(value.elts) == len(target.elts):
        return set().union(
            *(_bound(t, v, known) for t, v in zip(target.elts, value.elts, strict=True))
        )
    helper = _called(value, known)
    positions = () if helper is None else known[helper] or ()
    return {t.id for i, t in enumerate(target.elts) if i in positions and isinstance(t, ast.Name)}


def worker_names(tree: ast.Module, known: Helpers) -> set[str]:
    """Every name the file binds to a Worker."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                names |= _bound(target, node.value, known)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if ast.unparse(node.annotation) in WORKER:
                names.add(node.target.id)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            names |= {node.arg} if ast.unparse(node.annotation) in WORKER else set()
    return names


def private_uses(tree: ast.Module, known: Helpers) -> list[str]:
    """``line: expression`` of each private attribute of a Worker the file touches."""
    names = worker_names(tree, known)
    uses: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") and node.attr.endswith("__"):
            continue
        on = node.value
        helper = _called(on, known)
        if (isinstance(on, ast.Name) and on.id in names) or (
            helper is not None and known[helper] is None
        ):
            uses.append((node.lineno, node.col_offset, ast.unparse(node)))
    return [f"{line}: {text}" for line, _, text in sorted(uses)]


def offences(root: Path) -> list[str]:
    """Each private attribute of a Worker the tests under ``root`` touch."""
    trees = {path: ast.parse(path.read_text(), str(path)) for path in sorted(root.rglob("*.py"))}
    known = helpers(trees.values())
    return [
        f"{path.relative_to(root)}:{use}"
        for path, tree in trees.items()
        for use in private_uses(tree, known)
    ]


def test_no_test_touches_a_private_attribute_of_a_worker() -> None:
    found = offences(TESTS)
    assert found == [], (
        f"{len(found)} private attribute(s) of Worker used by tests: {found[:10]}; drive the "
        "worker through its constructor and public methods (docs/development.md, Worker seams)"
    )


OLD_STYLE = """
def worker(broken: bool = False) -> Worker: ...
def ledger_worker() -> tuple[Worker, LedgerStore]: ...
def traced(w: Worker, log: list[str]) -> None:
    sanitize = w._sanitize
async def test() -> None:
    w, stop, producer = worker(), asyncio.Event(), TransactionalProducer()
    w._set_connected(True)
    v, ledger = ledger_worker()
    ledger._restored.add(0)
    assert v._ledger is not None and worker(broken=True)._sanitize([]) and worker().__class__
    direct = loop.Worker(kafka, plan, runtime)
    direct._kafka = direct._kafka.model_copy()
    sender = sender_for(w, producer)
    sender._too_large(b"")
"""


def test_the_check_finds_what_the_worker_tests_did_before_the_seams() -> None:
    tree = ast.parse(OLD_STYLE)
    assert private_uses(tree, helpers([tree])) == [
        "5: w._sanitize",
        "8: w._set_connected",
        "11: v._ledger",
        "11: worker(broken=True)._sanitize",
        "13: direct._kafka",
        "13: direct._kafka",
    ]
