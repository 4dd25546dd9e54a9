"""Turn a validated config into the plan the batch transform runs.

This is the only place that maps config models to mechanism objects: each
field's registration (``privstream.kinds``) builds its handler, calibrated
with the field's resolved budget (``epsilon: auto`` shares and group-size
scaling applied, ``privstream.config.budget``), and gives the pipeline its
``FieldCodec``. The plan itself (``privstream.pipeline.plan``) is data.

Memoized fields (``memo_identity: message_key``, or ``memoize_by`` with
``memo_identity_trusted``) also get a ``MemoPlan``: where the device's
identity comes from (the Kafka message key, or a ``drop``/``public`` record
field), the *scopes* that key their noise (field name, identity source and
the release parameters, canonical JSON) and how to turn a parsed value back
into the domain value the memo token is built from. A memoized categorical's
randomized response runs over the domain in canonical order, so reordering
the domain in the config changes neither its scope nor its answers, while
any change of the field's parameters (domain, epsilon, delta) gives a new
scope and independent words. Reusing the words under new parameters would
couple the two releases: e.g. with a larger epsilon, the old answer flipped
and the new one kept would give the true value away with certainty.
"""

from __future__ import annotations

from typing import Any

from privstream.config import AppConfig, FieldConfig, config_sha256, resolve_budget
from privstream.errors import ConfigError, MechanismError, RegistryError
from privstream.kinds.auto import resolve_auto
from privstream.kinds.base import FieldKind
from privstream.kinds.presence import presence_field, with_missing
from privstream.kinds.registry import UNRELEASED, registration_of
from privstream.pipeline.handlers import FieldHandler
from privstream.pipeline.plan import (
    MemoPlan,
    PlannedField,
    RecordPlan,
    canonical_json,
    release_id,
)


def build_plan(config: AppConfig) -> RecordPlan:
    """Handlers for every released field, in config order; dropped fields have none.

    Each field's handler comes from its kind's registration; loading the
    registry checks it covers every kind and mechanism the config accepts.
    """
    budget = resolve_budget(config)
    fields: list[PlannedField] = []
    problems: list[str] = []
    for i, spec in enumerate(config.fields):
        if spec.kind in UNRELEASED:
            continue
        share = budget.fields.get(spec.name)
        try:
            spec = resolve_auto(spec, share)  # ``mechanism: auto`` made concrete
            entry = registration_of(spec)
            handler = entry.build(spec, share)
        except MechanismError as exc:  # parameters no mechanism can honour: a config problem
            problems.append(f"fields[{i}] ({spec.name}): {exc}")
            continue
        handler, codec = with_missing(spec, handler, entry)
        fields.append(
            PlannedField(
                handler=handler,
                kind=spec.kind,
                mechanism=entry.mechanism,
                release_id=release_id(spec, handler, share),
                memo=_memo_plan(spec, handler, entry),
                codec=codec,
            )
        )
        presence = presence_field(spec, budget)
        if presence is not None:
            fields.append(presence)
    if problems:
        raise ConfigError(problems)
    return RecordPlan(fields=tuple(fields), budget=budget, config_sha256=config_sha256(config))


def _memo_plan(spec: FieldConfig, handler: FieldHandler, entry: FieldKind[Any]) -> MemoPlan | None:
    memo = getattr(spec, "memoize_by", None)
    by_key = getattr(spec, "memo_identity", None) == "message_key"
    mech = handler.mechanism
    if (memo is None and not by_key) or mech is None:
        return None
    if entry.memo is None:
        raise RegistryError(
            f"field {spec.name!r}: kind {entry.label} takes memo options but registers "
            "no memo token (MemoSupport)"
        )
    domain = entry.memo.domain(handler)
    parameters = {
        "v": 2,
        "field": spec.name,
        "identity": ["message_key"] if by_key else ["field", memo],
        "mechanism": mech.name,
        "epsilon": mech.epsilon,
        "delta": mech.delta,
        "domain": list(domain) if domain is not None else None,
    }
    return MemoPlan(
        field=None if by_key else memo,
        scope=canonical_json({**parameters, "words": "value"}),
        domain=domain,
        identity_words=entry.memo.identity_words,
        seed_scope=canonical_json({**parameters, "words": "identity"}),
    )
