"""privstream: a streaming differential-privacy sanitizer for Kafka."""

__version__ = "0.1.0"
