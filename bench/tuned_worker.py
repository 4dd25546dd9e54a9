"""`privstream run` with client settings overridden (``bench/client_tuning.py``).

``PRIVSTREAM_BENCH_CLIENTS`` holds JSON: ``{"producer": {...}, "consumer": {...}}``
merged over the worker's own aiokafka options, and ``"per_message": true`` to
produce with ``producer.send`` per message (the path before the batch API).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiokafka import ConsumerRecord

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import privstream.worker.loop as loop
from privstream.cli.main import main
from privstream.pipeline import BatchResult
from privstream.pipeline.results import DeadLetter
from privstream.worker.produce import BatchSender

Options = Callable[..., dict[str, Any]]


def merged(options: Options, extra: dict[str, Any]) -> Options:
    return lambda *args: {**options(*args), **extra}


async def per_message(
    self: BatchSender, records: Sequence[ConsumerRecord], result: BatchResult
) -> list[DeadLetter]:
    """One ``producer.send`` per sanitized message (no dead letters in this benchmark)."""
    pending = [
        await self._producer.send(self._output, value=value, headers=self._headers)
        for value in result.outputs
    ]
    await asyncio.gather(*pending)
    return list(result.dead_letters)


if __name__ == "__main__":
    settings = json.loads(os.environ.get("PRIVSTREAM_BENCH_CLIENTS", "{}"))
    loop.producer_options = merged(loop.producer_options, settings.get("producer", {}))  # type: ignore[assignment]
    loop.consumer_options = merged(loop.consumer_options, settings.get("consumer", {}))  # type: ignore[assignment]
    if settings.get("per_message"):
        BatchSender.send = per_message  # type: ignore[method-assign]
    sys.exit(main())
