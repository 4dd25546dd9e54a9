r"""Draw outputs through the real pipeline: JSON bytes in, ``process_batch``, JSON out.

Every draw is a raw record serialised as JSON and sanitized by
``privstream.pipeline.process_batch`` with the production sampler
(``privstream.mechanisms.OsEntropy``, the kernel CSPRNG), in batches of up to
100,000 records (fewer for wide sets and vectors, to bound memory), exactly
as ``privstream sanitize`` runs it. The outputs are
parsed back and each examined field becomes a numpy column. A record the
pipeline dead-letters is an error of the audit (its inputs are valid by
construction), never skipped.

Memoized fields (``memoize_by``). Their noise words are a keyed function of
(memo value, true value): with one memo value every draw would be the same
answer, and the draws would not be independent. Each draw therefore carries
a distinct memo value (``audit-<nonce>-<i>``; a memo field is of kind
``drop`` or ``public``, which take any JSON value), and the words come from
the production ``MemoSource`` under a memo key drawn for the audit run
(``derive_memo_key(os.urandom(32))``). That audits what the guarantee is
about: one device's single answer, with the randomness of the secret key.
Neighbouring inputs are the same device holding ``x`` or ``x'``, i.e. two
records that differ in the field's value only. (Not audited, because no
epsilon covers it: that a device's answers change exactly when its value
does; README, "What it does not protect".)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from privstream.audit.by_kind import audit_width
from privstream.audit.events import Sample
from privstream.audit.targets import Target
from privstream.config.paths import split_path
from privstream.errors import AuditError
from privstream.mechanisms import OsEntropy
from privstream.mechanisms.rng import derive_memo_key
from privstream.pipeline import RecordPlan, process_batch
from privstream.pipeline.nesting import nest, released
from privstream.pipeline.noise import Fresh

#: records per ``process_batch`` call
BATCH_RECORDS = 100_000

#: bound on noise words / output numbers per batch (wide sets and vectors get smaller batches)
BATCH_VALUES = 2**23


def record_width(plan: RecordPlan) -> int:
    """Roughly how many noise words and output numbers one record of ``plan`` costs."""
    return max(sum(audit_width(f) for f in plan.fields), 1)


@dataclass(frozen=True)
class RecordSpec:
    """The raw records of one audit input: fixed field values, plus per-draw memo values."""

    fixed: Mapping[str, Any]
    #: these (memo) fields get a distinct string in every draw
    unique: tuple[str, ...] = ()

    def messages(self, start: int, count: int, nonce: int) -> list[bytes]:
        """JSON bytes of draws ``start .. start + count - 1``; a field named by a path
        (``device.os``) nested as the pipeline reads it (``privstream.pipeline.nesting``)."""
        body = json.dumps(_nested(self.fixed), separators=(",", ":"))
        if not self.unique:
            return [body.encode()] * count
        if any(len(split_path(name)) > 1 for name in self.unique):
            return [
                json.dumps(_nested({**self.fixed, **self._ids(nonce, i)})).encode()
                for i in range(start, start + count)
            ]
        head = body[:-1] + ("," if self.fixed else "")
        keys = [json.dumps(split_path(name)[0]) for name in self.unique]
        out: list[bytes] = []
        for i in range(start, start + count):
            parts = [f'{key}:"audit-{nonce:x}-{i}"' for key in keys]
            out.append((head + ",".join(parts) + "}").encode())
        return out

    def _ids(self, nonce: int, draw: int) -> dict[str, str]:
        return {name: f"audit-{nonce:x}-{draw}" for name in self.unique}


def _nested(values: Mapping[str, Any]) -> dict[str, Any]:
    """A record from values by field name, each under its path."""
    return nest([split_path(name) for name in values], list(values.values()))


class PipelineSampler:
    """Runs audit records through ``process_batch`` with the production noise source."""

    def __init__(self, plan: RecordPlan, *, batch_records: int = BATCH_RECORDS) -> None:
        self.plan = plan
        self.batch_records = max(1, min(batch_records, BATCH_VALUES // record_width(plan)))
        self._source = OsEntropy()
        self._memo_key = derive_memo_key(os.urandom(32))
        self.records = 0

    def sample(self, spec: RecordSpec, count: int, targets: Sequence[Target]) -> Sample:
        """``count`` independent releases of the record ``spec``; columns of ``targets``."""
        provider = Fresh(self._source, memo_key=self._memo_key)
        parts: dict[str, list[NDArray[Any]]] = {t.name: [] for t in targets}
        nonce = int.from_bytes(os.urandom(6), "big") << 32  # distinct memo values per call
        for start in range(0, count, self.batch_records):
            size = min(self.batch_records, count - start)
            result = process_batch(self.plan, spec.messages(start, size, nonce), provider)
            if result.dead_letters:
                first = result.dead_letters[0]
                raise AuditError(
                    f"the pipeline rejected an audit record ({first.reason}: {first.detail})"
                )
            decoded = [json.loads(raw) for raw in result.outputs]
            for target in targets:
                name = target.name
                keys = split_path(name)
                parts[name].append(target.convert([released(r, keys, None) for r in decoded]))
            self.records += size
        return Sample({t.name: np.concatenate(parts[t.name]) for t in targets})
