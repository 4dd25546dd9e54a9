"""Configuration: pydantic models and the loader. Knows nothing of Kafka clients."""

from service.config.load import config_sha256, load_config, parse_config, record_budget
from service.config.models import AppConfig, FieldConfig, KafkaConfig, NoisedField

__all__ = [
    "AppConfig",
    "FieldConfig",
    "KafkaConfig",
    "NoisedField",
    "config_sha256",
    "load_config",
    "parse_config",
    "record_budget",
]
