"""Turn a validated config into the per-field handlers the batch transform runs.

This is the only place that maps config models to mechanism objects. Each
mechanism is calibrated with the field's resolved budget (``epsilon: auto``
shares and group-size scaling applied, ``service.config.budget``).

Memoized fields (``memoize_by``) also get a ``MemoPlan``: the memo field's
name, the *scope* that keys their noise (field name, memo field name and the
release parameters, canonical JSON) and how to turn a parsed value back into
the domain value the memo token is built from. A memoized categorical's
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
from dataclasses import dataclass
from typing import Any

from service.config import AppConfig, Budget, FieldConfig, Guarantee, config_sha256, resolve_budget
from service.config.fields import (
    BooleanField,
    CategoricalField,
    FunctionalField,
    IntegerField,
    RealField,
    SetField,
    VectorField,
)
from service.errors import ConfigError, MechanismError
from service.mechanisms import LaplaceMechanism, Mechanism, RandomizedResponse
from service.mechanisms.integer_laplace import IntegerLaplaceMechanism
from service.mechanisms.randomized_response import DomainValue
from service.pipeline.fields import (
    BooleanHandler,
    CategoricalHandler,
    FieldHandler,
    IntegerHandler,
    PublicHandler,
    RealHandler,
)
from service.pipeline.structured import HashedHandler, SetHandler, VectorHandler


def canonical_json(value: object) -> bytes:
    """One byte string per JSON value: sorted keys, no spaces, ASCII (lone surrogates escaped)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


@dataclass(frozen=True)
class MemoPlan:
    """How a memoized field's noise is keyed (``memoize_by``)."""

    #: the record field whose raw value identifies the device
    field: str
    #: field name, memo field name and release parameters, canonical JSON
    scope: bytes
    #: parsed value -> released true value: ``domain[index]``, or the value itself when None
    domain: tuple[DomainValue, ...] | None

    def token(self, memo_value: str | int, parsed: Any) -> bytes:
        """Canonical (memo value, true value) of one record: the row's memo token."""
        true_value = parsed if self.domain is None else self.domain[parsed]
        return canonical_json([memo_value, true_value])


@dataclass(frozen=True)
class RecordPlan:
    """What one sanitized record is made of, and the guarantee it carries."""

    handlers: tuple[FieldHandler, ...]
    kinds: tuple[str, ...]
    #: per handler, the digest of its release (``release_id``): what keys its noise
    release_ids: tuple[bytes, ...]
    budget: Budget
    config_sha256: str
    #: per handler, its memo plan or None (empty: no field is memoized)
    memos: tuple[MemoPlan | None, ...] = ()

    def __post_init__(self) -> None:
        if not self.memos:
            object.__setattr__(self, "memos", (None,) * len(self.handlers))
        if len(self.memos) != len(self.handlers):
            raise ValueError("one memo entry (or None) per handler")

    @property
    def epsilon(self) -> float:
        """Event-level epsilon of one record (what each record's release satisfies)."""
        return self.budget.event.epsilon

    @property
    def delta(self) -> float:
        return self.budget.event.delta


def build_plan(config: AppConfig) -> RecordPlan:
    """Handlers for every released field, in config order; dropped fields have none."""
    budget = resolve_budget(config)
    released = [(i, spec) for i, spec in enumerate(config.fields) if spec.kind != "drop"]
    handlers: list[FieldHandler] = []
    release_ids: list[bytes] = []
    memos: list[MemoPlan | None] = []
    problems: list[str] = []
    for i, spec in released:
        share = budget.fields.get(spec.name)
        try:
            handler = _handler(spec, share)
        except MechanismError as exc:  # parameters no mechanism can honour: a config problem
            problems.append(f"fields[{i}] ({spec.name}): {exc}")
        else:
            handlers.append(handler)
            release_ids.append(release_id(spec, handler, share))
            memos.append(_memo_plan(spec, handler))
    if problems:
        raise ConfigError(problems)
    return RecordPlan(
        handlers=tuple(handlers),
        kinds=tuple(spec.kind for _, spec in released),
        release_ids=tuple(release_ids),
        budget=budget,
        config_sha256=config_sha256(config),
        memos=tuple(memos),
    )


#: version of the release descriptor; part of every release id
RELEASE_VERSION = 2


def release_id(spec: FieldConfig, handler: FieldHandler, share: Guarantee | None) -> bytes:
    """SHA-256 of the canonical description of one field's release.

    Everything that shapes the field's output distribution is in it: the
    field's whole config entry (name, kind, mechanism, calibration, bounds,
    domain, universe, grid, memo field, ...), the (epsilon, delta) its
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
        "spec": spec.model_dump(mode="json"),
        "share": None if share is None else [share.epsilon, share.delta],
        "mechanism": None if mechanism is None else type(mechanism).__name__,
        "params": None if mechanism is None else mechanism.params(),
    }
    return hashlib.sha256(canonical_json(description)).digest()


def _memo_plan(spec: FieldConfig, handler: FieldHandler) -> MemoPlan | None:
    memo = getattr(spec, "memoize_by", None)
    mech = handler.mechanism
    if memo is None or mech is None:
        return None
    domain: tuple[DomainValue, ...] | None = None
    if isinstance(mech, RandomizedResponse):
        domain = mech.domain
    parameters = {
        "v": 1,
        "field": spec.name,
        "memoize_by": memo,
        "mechanism": mech.name,
        "epsilon": mech.epsilon,
        "delta": mech.delta,
        "domain": list(domain) if domain is not None else None,
    }
    return MemoPlan(field=memo, scope=canonical_json(parameters), domain=domain)


def _canonical_order(domain: tuple[DomainValue, ...]) -> tuple[DomainValue, ...]:
    return tuple(sorted(domain, key=canonical_json))


def _handler(spec: FieldConfig, share: Guarantee | None) -> FieldHandler:
    if share is None:
        return PublicHandler(spec.name)
    eps, dlt = share.epsilon, share.delta
    if isinstance(spec, RealField):
        bounds = (float(spec.bounds[0]), float(spec.bounds[1]))
        return RealHandler(spec.name, _real_mechanism(spec, eps, dlt), bounds)
    if isinstance(spec, IntegerField):
        lo, hi = int(spec.bounds[0]), int(spec.bounds[1])
        return IntegerHandler(
            spec.name, IntegerLaplaceMechanism(bounds=(lo, hi), epsilon=eps, delta=dlt)
        )
    if isinstance(spec, CategoricalField):
        if spec.mechanism == "local_hashing":
            from service.mechanisms.local_hashing import OptimalLocalHashing

            return HashedHandler(spec.name, OptimalLocalHashing(epsilon=eps))
        assert spec.domain is not None  # noqa: S101 -- guaranteed by the config model
        # memoized: canonical order, so that reordering the domain keeps every answer
        domain = spec.domain if spec.memoize_by is None else _canonical_order(spec.domain)
        rr = RandomizedResponse(domain=domain, epsilon=eps, delta=dlt)
        return CategoricalHandler(spec.name, rr, spec.unknown_as)
    if isinstance(spec, BooleanField):
        rr = RandomizedResponse(domain=(False, True), epsilon=eps, delta=dlt)
        return BooleanHandler(spec.name, rr)
    if isinstance(spec, SetField):
        from service.mechanisms.unary_encoding import UnaryEncoding

        unary = UnaryEncoding(
            universe=spec.universe, max_items=spec.max_items, epsilon=eps, variant=spec.variant
        )
        return SetHandler(spec.name, unary, spec.universe, spec.max_items)
    if isinstance(spec, VectorField):
        from service.mechanisms.vector_gaussian import VectorGaussianMechanism

        vector = VectorGaussianMechanism(
            dimension=spec.dimension,
            l2_bound=spec.l2_bound,
            epsilon=eps,
            delta=dlt,
            calibration=spec.calibration,
        )
        return VectorHandler(spec.name, vector, spec.dimension)
    if isinstance(spec, FunctionalField):
        from service.mechanisms.functional import FunctionalMechanism

        functional = FunctionalMechanism(
            grid_points=spec.grid,
            bandwidth=spec.bandwidth,
            rkhs_radius=spec.rkhs_radius,
            epsilon=eps,
            delta=dlt,
            calibration=spec.calibration,
        )
        return VectorHandler(spec.name, functional, len(spec.grid))
    raise AssertionError(f"no handler for field kind {spec.kind}")  # pragma: no cover


def _real_mechanism(spec: RealField, eps: float, dlt: float) -> Mechanism:
    if spec.mechanism == "gaussian":
        from service.mechanisms.gaussian import GaussianMechanism

        if spec.calibration == "classical":
            return GaussianMechanism(
                bounds=spec.bounds, epsilon=eps, delta=dlt, calibration="classical"
            )
        return GaussianMechanism(bounds=spec.bounds, epsilon=eps, delta=dlt, calibration="analytic")
    if spec.calibration == "thesis":
        return LaplaceMechanism(bounds=spec.bounds, epsilon=eps, delta=dlt, calibration="thesis")
    return LaplaceMechanism(bounds=spec.bounds, epsilon=eps, delta=dlt, calibration="tight")
