"""`privstream run` with the sanitizer swapped for a JSON pass-through (benchmark baseline).

Same process, clients, client settings, transactions, headers and loop as the
real worker; only ``process_batch`` is replaced by orjson decode + encode, so
the end-to-end benchmark measures what sanitizing costs on top of moving JSON.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import privstream.worker.sanitize as sanitize
from privstream.cli.main import main
from privstream.pipeline.results import BatchResult


def passthrough(
    plan: object,
    messages: Sequence[bytes],
    noise: object,
    keys: object = None,
    *,
    subject: str | None = None,
) -> BatchResult:
    """``process_batch``'s signature (a mismatch would dead-letter every record)."""
    loads, dumps = orjson.loads, orjson.dumps
    outputs = [dumps(loads(raw)) for raw in messages]
    return BatchResult(outputs=outputs, output_index=list(range(len(messages))))


if __name__ == "__main__":
    sanitize.process_batch = passthrough  # type: ignore[assignment]
    sys.exit(main())
