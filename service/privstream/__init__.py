"""privstream: a streaming differential-privacy sanitizer for Kafka."""

#: the one place the version is written: pyproject.toml reads it (tool.setuptools.dynamic),
#: CHANGELOG.md's newest section names it (tests/package)
__version__ = "0.1.0"
