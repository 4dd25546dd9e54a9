"""Turn a validated config into the per-field handlers the batch transform runs.

This is the only place that maps config models to mechanism objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.config import AppConfig, config_sha256, record_budget
from service.config.models import BooleanField, CategoricalField, FieldConfig, RealField
from service.mechanisms import LaplaceMechanism, RandomizedResponse
from service.pipeline.fields import (
    BooleanHandler,
    CategoricalHandler,
    FieldHandler,
    PublicHandler,
    RealHandler,
)


@dataclass(frozen=True)
class RecordPlan:
    """What one sanitized record is made of, and the guarantee it carries."""

    handlers: tuple[FieldHandler, ...]
    kinds: tuple[str, ...]
    epsilon: float
    delta: float
    config_sha256: str


def build_plan(config: AppConfig) -> RecordPlan:
    """Handlers for every released field, in config order; dropped fields have none."""
    released = [spec for spec in config.fields if spec.kind != "drop"]
    epsilon, delta = record_budget(config)
    return RecordPlan(
        handlers=tuple(_handler(spec) for spec in released),
        kinds=tuple(spec.kind for spec in released),
        epsilon=epsilon,
        delta=delta,
        config_sha256=config_sha256(config),
    )


def _handler(spec: FieldConfig) -> FieldHandler:
    if isinstance(spec, RealField):
        mech = LaplaceMechanism(
            bounds=spec.bounds,
            epsilon=spec.epsilon,
            delta=spec.delta,
            calibration=spec.calibration,
        )
        return RealHandler(spec.name, mech)
    if isinstance(spec, CategoricalField):
        rr = RandomizedResponse(domain=spec.domain, epsilon=spec.epsilon, delta=spec.delta)
        return CategoricalHandler(spec.name, rr, spec.unknown_as)
    if isinstance(spec, BooleanField):
        rr = RandomizedResponse(domain=(False, True), epsilon=spec.epsilon, delta=spec.delta)
        return BooleanHandler(spec.name, rr)
    return PublicHandler(spec.name)
