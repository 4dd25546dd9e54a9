"""``privstream estimate``: reading, aggregation and the report.

The estimators themselves (the math) are functions of the mechanism modules
in ``privstream.mechanisms``; this package only reads sanitized records, keeps
what those functions need, and formats what they return.
"""

from privstream.estimate.accumulators import Options
from privstream.estimate.aggregate import StreamAggregate, TruthAggregate
from privstream.estimate.report import build_report, render_table

__all__ = ["Options", "StreamAggregate", "TruthAggregate", "build_report", "render_table"]
