"""``privstream estimate``: reading, aggregation and the report.

The estimators themselves (the math) are functions of the mechanism modules
in ``privstream.mechanisms``; this package only reads sanitized records, keeps
what those functions need, and formats what they return.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from privstream.lazy import lazy_attributes

if TYPE_CHECKING:
    from privstream.estimate.accumulators import Options
    from privstream.estimate.aggregate import StreamAggregate, TruthAggregate
    from privstream.estimate.report import build_report, render_table

#: name -> module; imported on first use: the field-kind registry imports the estimators
#: on every start-up, which must not pay for the aggregation and the report
_LAZY = {
    "Options": "accumulators",
    "StreamAggregate": "aggregate",
    "TruthAggregate": "aggregate",
    "build_report": "report",
    "render_table": "report",
}

__all__ = ["Options", "StreamAggregate", "TruthAggregate", "build_report", "render_table"]


__getattr__ = lazy_attributes(__name__, _LAZY)
