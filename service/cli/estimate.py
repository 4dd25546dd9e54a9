"""``privstream estimate``: being written (issue 6)."""

from __future__ import annotations

import argparse

from service.config import AppConfig
from service.pipeline import RecordPlan


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this command's options (besides --config) to its subparser."""


def run(args: argparse.Namespace, config: AppConfig, plan: RecordPlan) -> int:
    """Run the command; returns the exit code."""
    raise NotImplementedError
