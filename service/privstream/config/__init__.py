"""Configuration: pydantic models, the loader and the budget. Knows nothing of Kafka clients."""

from privstream.config.budget import Budget, Guarantee, resolve_budget
from privstream.config.fields import FieldConfig, NoisedField
from privstream.config.load import config_sha256, load_config, parse_config, record_budget
from privstream.config.models import AppConfig, KafkaConfig

__all__ = [
    "AppConfig",
    "Budget",
    "FieldConfig",
    "Guarantee",
    "KafkaConfig",
    "NoisedField",
    "config_sha256",
    "load_config",
    "parse_config",
    "record_budget",
    "resolve_budget",
]
