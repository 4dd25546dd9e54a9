"""The plan of a record: the per-field handlers the batch transform runs, and their keys.

A plan is data the pipeline owns: each ``PlannedField`` carries its handler,
its release id, its memo plan and a small ``FieldCodec`` (how the fast path
parses and encodes its column). Plans are built one layer up, by the
field-kind registry (``privstream.kinds.build_plan``), the only place that
maps config models to mechanism objects.

Memoized fields (``memo_identity: message_key``, or ``memoize_by`` with
``memo_identity_trusted``) also get a ``MemoPlan``: where the device's
identity comes from (the Kafka message key, or a record field), the *scopes*
that key their noise (field name, identity source and the release
parameters, canonical JSON) and how to turn a parsed value back into the
domain value the memo token is built from. A memoized categorical's
randomized response runs over the domain in canonical order, so reordering
the domain in the config changes neither its scope nor its answers, while
any change of the field's parameters (domain, epsilon, delta) gives a new
scope and independent words. Reusing the words under new parameters would
couple the two releases: e.g. with a larger epsilon, the old answer flipped
and the new one kept would give the true value away with certainty.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from numpy.typing import NDArray

from privstream.config import Budget, FieldConfig, Guarantee
from privstream.config.missing import MISSING_DEFAULTS
from privstream.mechanisms.randomized_response import DomainValue
from privstream.pipeline.columns import ColumnParser
from privstream.pipeline.handlers import FieldHandler
from privstream.pipeline.long_integers import LongInteger


def canonical_json(value: object) -> bytes:
    """One byte string per JSON value: sorted keys, no spaces, ASCII (lone surrogates escaped)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


@dataclass(frozen=True)
class MemoPlan:
    """How a memoized field's noise is keyed.

    A row's memo words are split in two (``MemoSource`` under two scopes):
    the first ``identity_words`` are a function of the device identity alone
    (``seed_scope``), the others of (identity, true value) (``scope``). Local
    hashing takes its hash seed from word 0, so its seed names the device
    and never the value: a seed that changed with the value would show every
    change of value, and equal seeds would prove equal values.
    """

    #: the record field that identifies the device, or None for the Kafka message key
    field: str | None
    #: field name, identity source and release parameters, canonical JSON (value words)
    scope: bytes
    #: parsed value -> released true value: ``domain[index]``, or the value itself when None
    domain: tuple[DomainValue, ...] | None
    #: leading words of each row that depend on the identity only
    identity_words: int = 0
    #: the scope of those words (distinct from ``scope``)
    seed_scope: bytes = b""

    @property
    def by_key(self) -> bool:
        """Memoized by the Kafka message key (the trusted identity)."""
        return self.field is None

    def token(self, identity: bytes, parsed: Any) -> bytes:
        """The row's memo token: ``len(identity) (u32 LE) || identity || canonical true value``."""
        true_value = parsed if self.domain is None else self.domain[parsed]
        return _length32(identity) + identity + canonical_json(true_value)

    @staticmethod
    def identity_of(token: bytes) -> bytes:
        """The identity part of a token made by ``token``."""
        return token[4 : 4 + int.from_bytes(token[:4], "little")]


def field_identity(memo_value: str | int) -> bytes:
    """A memo field's value as an identity: canonical JSON, so ``"7"`` and ``7`` differ.

    An integer too long to convert is its token, its one JSON spelling (``long_integers``).
    """
    if isinstance(memo_value, LongInteger):
        return memo_value.text.encode()
    return canonical_json(memo_value)


def _length32(part: bytes) -> bytes:
    return len(part).to_bytes(4, "little")


def unkeyed(plan: RecordPlan) -> RecordPlan:
    """The plan for records without message keys (file mode): key-memoized fields unmemoized.

    Without a key there is no trusted identity; such a field is then noised
    like any other field (fresh, or per record when replay-stable): every
    report is a release of its own.
    """
    if not any(f.memo is not None and f.memo.by_key for f in plan.fields):
        return plan
    fields = tuple(
        replace(f, memo=None) if f.memo is not None and f.memo.by_key else f for f in plan.fields
    )
    return replace(plan, fields=fields)


@dataclass(frozen=True, kw_only=True)
class FieldCodec:
    """What the pipeline needs of a field's kind: read its column, write its values."""

    #: the fast path's column parser (``privstream.pipeline.columns``)
    column: ColumnParser
    #: (handler, released values) -> the JSON text of each (``privstream.pipeline.encode``)
    texts: Callable[[Any, list[Any]], list[bytes]]
    #: (handler, count) -> canary inputs for the error metrics (``privstream.pipeline.canary``);
    #: None: the kind's error is not measured
    canary: Callable[[Any, int], NDArray[Any]] | None = None


@dataclass(frozen=True, kw_only=True)
class PlannedField:
    """One released field of a plan: its handler and everything that keys its release."""

    handler: FieldHandler
    #: the config kind (``real``, ``categorical``, ...)
    kind: str
    #: the config's mechanism, ``auto`` resolved (None for public): with ``kind``, the key
    #: of the field's registration in ``privstream.kinds`` and the per-layer tables
    mechanism: str | None
    #: the digest of the field's release (``release_id``): what keys its noise
    release_id: bytes
    #: how its noise is memoized, or None when it is not
    memo: MemoPlan | None = None
    #: how the fast path reads and writes it
    codec: FieldCodec

    @property
    def name(self) -> str:
        return self.handler.name


@dataclass(frozen=True, kw_only=True)
class RecordPlan:
    """What one sanitized record is made of, and the guarantee it carries."""

    #: the released fields, in config order (dropped fields have none)
    fields: tuple[PlannedField, ...]
    budget: Budget
    config_sha256: str

    @property
    def handlers(self) -> tuple[FieldHandler, ...]:
        """The fields' handlers, in order (a view of ``fields``)."""
        return tuple(f.handler for f in self.fields)

    def with_handlers(self, handlers: Sequence[FieldHandler]) -> RecordPlan:
        """The same plan with other handlers (the audit's deliberately broken mechanisms)."""
        fields = tuple(replace(f, handler=h) for f, h in zip(self.fields, handlers, strict=True))
        return replace(self, fields=fields)

    @property
    def release_sha256(self) -> str:
        """SHA-256 of the fields' release ids, in order: what was released, as calibrated.

        The config hash names the config as written; two privstream versions can
        calibrate one config differently (``mechanism: auto`` resolving to another
        mechanism), and this digest tells those releases apart.
        """
        return hashlib.sha256(b"".join(f.release_id for f in self.fields)).hexdigest()

    @property
    def field_releases(self) -> dict[str, str]:
        """Each released field's name -> the first ``FIELD_RELEASE_HEX`` hex digits of its
        release id: what ``estimate`` matches field by field (``privstream-field-releases``),
        so reordering or adding fields keeps earlier records usable for the unchanged ones."""
        return {f.name: f.release_id.hex()[:FIELD_RELEASE_HEX] for f in self.fields}

    @property
    def epsilon(self) -> float:
        """Event-level epsilon of one record (what each record's release satisfies)."""
        return self.budget.event.epsilon

    @property
    def delta(self) -> float:
        return self.budget.event.delta


#: hex digits of a release id in the per-field header: 64 bits tell calibrations apart (the
#: header guards against mistakes, not forgery: anyone who can write the topic can write it)
FIELD_RELEASE_HEX = 16
#: version of the release descriptor; part of every release id
RELEASE_VERSION = 2


def release_spec(spec: FieldConfig) -> dict[str, Any]:
    """The field's config entry as its release id hashes it: every option, except those
    added with ``on_missing`` while at their defaults (``MISSING_DEFAULTS``), so the
    release ids (and the noise) of configs written before them stay what they were."""
    dumped = spec.model_dump(mode="json")
    for option, default in MISSING_DEFAULTS.items():
        if option in dumped and dumped[option] == default:
            del dumped[option]
    return dumped


def release_id(spec: FieldConfig, handler: FieldHandler, share: Guarantee | None) -> bytes:
    """SHA-256 of the canonical description of one field's release.

    Everything that shapes the field's output distribution is in it: the
    field's whole config entry (name, kind, mechanism -- ``auto`` already
    resolved to the chosen one --, calibration, bounds,
    domain, universe, grid, memo field, on_missing and impute when set, ...:
    ``release_spec``), the (epsilon, delta) its
    mechanism was calibrated to after ``auto`` shares and group scaling, and
    the mechanism's calibrated parameters. Its key for noise is derived from
    this digest (``NoiseKeys.field``), so any change of a release parameter
    gives the field independent noise, and the same release keeps its noise
    wherever the field sits in the config. Config entries of other fields
    enter only through this field's resolved share.
    """
    mechanism = handler.mechanism
    description = {
        "v": RELEASE_VERSION,
        "spec": release_spec(spec),
        "share": None if share is None else [share.epsilon, share.delta],
        "mechanism": None if mechanism is None else type(mechanism).__name__,
        "params": None if mechanism is None else mechanism.params(),
    }
    return hashlib.sha256(canonical_json(description)).digest()
