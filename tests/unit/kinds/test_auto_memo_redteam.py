"""Red team (session 12): Subset Selection joining ``auto`` re-released memoized fields
(fixed: ``auto`` leaves subset selection out of a memoized field's menu; SS is capped
at ``MAX_DOMAIN`` values like unary encoding).

A memoized categorical answers each (device, value) with the same words forever, so a
device's repeated reports cost its epsilon once. Its memo scope is its release id, which
names the *resolved* mechanism. With this branch, ``auto`` over k = 5..48 values at
eps <= 2 resolves to ``subset_selection`` where main resolved ``randomized_response`` or
``local_hashing``: with the config unchanged, the upgrade gives every memoized device a
second, independent report of the same value (twice its epsilon over its lifetime) and
changes the output from a value to an array. Main's choices, pinned here, were computed
from main's ``selection.least_variance`` (RR, OLH, OUE).

Deterministic: no noise is drawn.
"""

from __future__ import annotations

from typing import Any

import pytest
from privstream.config import parse_config
from privstream.errors import PrivstreamError
from privstream.kinds import build_plan
from privstream.mechanisms.unary_encoding import MAX_UNIVERSE

from tests.support.configs import config_dict

#: (domain size, epsilon) -> what main's ``auto`` resolved a string domain to
MAIN_CHOICE = {
    (8, 1.0): "randomized_response",
    (16, 1.0): "local_hashing",
    (48, 2.0): "local_hashing",
}


def _planned(field: dict[str, Any]) -> Any:
    (planned,) = build_plan(parse_config(config_dict([field], epsilon=5.0))).fields
    return planned


@pytest.mark.parametrize(("k", "eps"), sorted(MAIN_CHOICE))
def test_a_memoized_auto_field_keeps_its_release_across_the_upgrade(k: int, eps: float) -> None:
    domain = [f"v{i:03d}" for i in range(k)]
    field = {
        "name": "c",
        "kind": "categorical",
        "domain": domain,
        "epsilon": eps,
        "memo_identity": "message_key",
    }
    auto = _planned(field)
    assert auto.mechanism == MAIN_CHOICE[k, eps], (
        f"auto over {k} values at eps {eps} now resolves to {auto.mechanism}, main's to "
        f"{MAIN_CHOICE[k, eps]}: every memoized device is re-randomized by the upgrade"
    )


def test_auto_keeps_the_release_id_of_mains_randomized_response() -> None:
    # the docs promise an auto field resolving to RR keeps an explicit RR's noise
    field = {"name": "c", "kind": "categorical", "domain": [f"v{i:03d}" for i in range(8)]}
    field |= {"epsilon": 1.0, "memo_identity": "message_key"}
    before = _planned({**field, "mechanism": "randomized_response"})
    assert _planned(field).release_id == before.release_id


def test_explicit_subset_selection_is_refused_beyond_max_universe_like_unary_encoding() -> None:
    # OUE refuses more than MAX_UNIVERSE values (the words one record may draw); SS takes
    # any domain: 400,000 values at eps 1 draw d + 1 = 107,578 words and shuffle 400,000
    # positions per record (0.4 s a record measured), a worker that cannot keep up
    domain = list(range(MAX_UNIVERSE + 1))
    field = {"name": "c", "kind": "categorical", "domain": domain, "epsilon": 1.0}
    with pytest.raises(PrivstreamError):
        _planned({**field, "mechanism": "unary_encoding"})
    with pytest.raises(PrivstreamError):
        _planned({**field, "mechanism": "subset_selection"})
