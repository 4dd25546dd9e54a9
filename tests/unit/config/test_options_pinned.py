"""A field option added to a model must not change the release id of configs without it.

``release_spec`` (hence the release id, hence the noise key) dumps every
option of a field's model, so a new option with a default would change the
noise of every field of that kind in every deployed config: fresh noise on a
replay after an upgrade (red team 13b found it for ``target``). An option
added after a kind's release id was fixed must therefore be left out at its
default (``MISSING_DEFAULTS``). ``OPTIONS`` pins each kind's options that
do enter the release id at any value; a new option fails here until it is
either in ``MISSING_DEFAULTS`` or (a deliberate release-id change with a
``RELEASE_VERSION`` bump) added to ``OPTIONS``.
"""

from __future__ import annotations

from typing import get_args

import pytest
from privstream.config.fields import FIELD_MODELS
from privstream.config.missing import MISSING_DEFAULTS
from pydantic import BaseModel

NOISED = {"name", "kind", "mechanism", "epsilon", "delta"}
MEMO = {"memoize_by", "memo_identity", "memo_identity_trusted"}
OPTIONS: dict[str, set[str]] = {
    "drop": {"name", "kind"},
    "public": {"name", "kind", "allow_nested"},
    "real": NOISED | {"bounds", "calibration"},
    "integer": NOISED | {"bounds"},
    "categorical": NOISED | MEMO | {"domain", "unknown_as"},
    "boolean": NOISED | MEMO,
    "set": NOISED | {"universe", "max_items", "on_too_many", "on_unknown", "variant"},
    "vector": NOISED | {"dimension", "l2_bound", "calibration"},
    "functional": NOISED | {"grid", "bandwidth", "rkhs_radius", "calibration"},
    "timestamp": NOISED | {"bounds", "granularity", "epoch_unit", "assume_utc", "output"},
}


def _kind(model: type[BaseModel]) -> str:
    (kind,) = get_args(model.model_fields["kind"].annotation)
    return str(kind)


@pytest.mark.parametrize("model", FIELD_MODELS, ids=_kind)
def test_every_option_is_pinned_or_left_out_at_its_default(model: type[BaseModel]) -> None:
    kind = _kind(model)
    unpinned = set(model.model_fields) - OPTIONS[kind] - set(MISSING_DEFAULTS)
    assert not unpinned, (
        f"{kind} field option(s) {sorted(unpinned)} would enter every {kind} field's release "
        "id at their default, changing the noise of deployed configs: add them to "
        "privstream.config.missing.MISSING_DEFAULTS"
    )


@pytest.mark.parametrize("model", FIELD_MODELS, ids=_kind)
def test_no_pinned_option_is_gone(model: type[BaseModel]) -> None:
    """A pinned option that disappeared also changes release ids (bump RELEASE_VERSION)."""
    kind = _kind(model)
    assert OPTIONS[kind] <= set(model.model_fields), sorted(OPTIONS[kind] - set(model.model_fields))


def test_every_kind_is_pinned() -> None:
    assert {_kind(model) for model in FIELD_MODELS} == set(OPTIONS)
