"""Turn a validated config into the per-field handlers the batch transform runs.

This is the only place that maps config models to mechanism objects. Each
mechanism is calibrated with the field's resolved budget (``epsilon: auto``
shares and group-size scaling applied, ``service.config.budget``).
"""

from __future__ import annotations

from dataclasses import dataclass

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
from service.pipeline.fields import (
    BooleanHandler,
    CategoricalHandler,
    FieldHandler,
    IntegerHandler,
    PublicHandler,
    RealHandler,
)
from service.pipeline.structured import HashedHandler, SetHandler, VectorHandler


@dataclass(frozen=True)
class RecordPlan:
    """What one sanitized record is made of, and the guarantee it carries."""

    handlers: tuple[FieldHandler, ...]
    kinds: tuple[str, ...]
    #: each released field's position in the config: its id for keyed noise
    field_ids: tuple[int, ...]
    budget: Budget
    config_sha256: str

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
    handlers, problems = [], []
    for i, spec in released:
        try:
            handlers.append(_handler(spec, budget.fields.get(spec.name)))
        except MechanismError as exc:  # parameters no mechanism can honour: a config problem
            problems.append(f"fields[{i}] ({spec.name}): {exc}")
    if problems:
        raise ConfigError(problems)
    return RecordPlan(
        handlers=tuple(handlers),
        kinds=tuple(spec.kind for _, spec in released),
        field_ids=tuple(i for i, _ in released),
        budget=budget,
        config_sha256=config_sha256(config),
    )


def _handler(spec: FieldConfig, share: Guarantee | None) -> FieldHandler:
    if share is None:
        return PublicHandler(spec.name)
    eps, dlt = share.epsilon, share.delta
    if isinstance(spec, RealField):
        return RealHandler(spec.name, _real_mechanism(spec, eps, dlt))
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
        rr = RandomizedResponse(domain=spec.domain, epsilon=eps, delta=dlt)
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
        from service.mechanisms.gaussian import VectorGaussianMechanism

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
