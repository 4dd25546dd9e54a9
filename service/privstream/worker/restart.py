"""How the worker restarts a failed session: jittered backoff, and the error in one line."""

from __future__ import annotations

import random  # csprng-ok: backoff jitter only, never noise


def describe(exc: BaseException) -> str:
    """``Name: message`` once (aiokafka's messages often start with their class name)."""
    name, text = type(exc).__name__, str(exc)
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"


class Backoff:
    """Exponential delays with full jitter, reset after a committed batch."""

    def __init__(self, initial_s: float = 0.2, cap_s: float = 30.0) -> None:
        self._initial = initial_s
        self._cap = cap_s
        self._next = initial_s

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._cap)
        return random.uniform(delay / 2, delay)  # noqa: S311 -- jitter, not noise

    def reset(self) -> None:
        self._next = self._initial
