"""Registration of ``categorical`` with ``mechanism: subset_selection`` (SS, one value per record).

The field parses like any categorical (a domain value to its position), in
the domain's *canonical* order (sorted by canonical JSON text), memoized or
not, so no draw depends on the order the config lists the domain in. The
release is the JSON array of the ``d`` chosen domain values in that
canonical order (``privstream.mechanisms.subset_selection``); ``estimate``
counts each value's arrays and inverts ``(c/n - q) / (p - q)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from privstream.config import Guarantee
from privstream.config.fields import CategoricalField
from privstream.kinds.base import FieldKind, MemoSupport, calibrated, describe, mechanism_domain
from privstream.mechanisms import NoiseSource
from privstream.mechanisms.subset_selection import SubsetSelection
from privstream.pipeline import canary, columns, encode
from privstream.pipeline.handlers import CategoricalHandler, Column
from privstream.pipeline.plan import canonical_json


class SubsetHandler(CategoricalHandler):
    """A domain value in, the array of the ``d`` released domain values out."""

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        indices = np.asarray(values, dtype=np.int64)
        picked = self.mechanism.release(indices, source)
        domain = self.mechanism.domain
        return Column(
            lambda: [list(map(domain.__getitem__, row)) for row in picked.tolist()],
            lambda: self.mechanism.noise_error(indices, picked),
        )


def _subset(spec: CategoricalField, share: Guarantee | None) -> SubsetHandler:
    eps, _ = calibrated("categorical (subset_selection)", share)
    if spec.domain is None:  # the config model requires it
        raise AssertionError("subset_selection without a domain")  # pragma: no cover
    domain = tuple(sorted(spec.domain, key=canonical_json))
    return SubsetHandler(spec.name, SubsetSelection(domain=domain, epsilon=eps), spec.unknown_as)


SUBSET = FieldKind(
    kind="categorical",
    mechanism="subset_selection",
    model=CategoricalField,
    build=_subset,
    column=columns.categorical_column,
    texts=lambda handler, values: encode.column_texts(values),
    # the token holds the value; the scope holds the domain in canonical order
    memo=MemoSupport(domain=mechanism_domain),
    explain=describe,
    canary=canary.categorical_inputs,
)

REGISTRATIONS = (SUBSET,)
