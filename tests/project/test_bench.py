"""The benchmark scripts' stand-ins keep the signatures of what they replace."""

from __future__ import annotations

import inspect

from privstream.pipeline import process_batch

from bench.passthrough_worker import passthrough


def test_the_passthrough_worker_takes_what_the_worker_passes_process_batch() -> None:
    """A parameter the worker passes and the stand-in lacks makes every batch fail, and the
    worker then sanitizes record by record: the baseline would measure that, not JSON."""
    ours = inspect.signature(process_batch).parameters
    theirs = inspect.signature(passthrough).parameters
    assert [(p.name, p.kind) for p in theirs.values()] == [(p.name, p.kind) for p in ours.values()]
