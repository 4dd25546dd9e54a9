"""``mechanism: auto`` for categorical fields (issue 16, items 1 and 2).

The variances are written here from the formulas (randomized response:
Jazbec Ex. 4.10 with Warner's debiasing; local hashing: Wang et al. 2017,
Sec. 4, ``g = round(e^eps) + 1``; optimized unary encoding: ``p = 1/2``,
``q = 1/(e^eps + 1)``; subset selection: ``p = d e^eps / (d e^eps + k - d)``,
``q = (p (d - 1) + (1 - p) d) / (k - 1)``, Wang et al. 2016), independently of
the mechanism modules, and the choice is checked against them and against
issue 16's and issue 35's tables.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from privstream.audit.by_kind import target_for
from privstream.cli.main import main
from privstream.cli.metadata import sidecar_path, write_sidecar
from privstream.cli.sanitize import sanitize_stream
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.mechanisms.selection import frequency_variances, least_variance
from privstream.pipeline.handlers import Rejected
from privstream.pipeline.plan import RecordPlan
from privstream.testing import SeededSource

from tests.support.configs import config_dict

N = 1000


def _vector(keep: float, other: float, k: int, n: int) -> float:
    """Summed variance over k values: A + (k - 1) B, A at f = 1 and B at f = 0 of
    (f keep(1-keep) + (1-f) other(1-other)) / (n (keep-other)^2)."""
    return (keep * (1 - keep) + (k - 1) * other * (1 - other)) / (n * (keep - other) ** 2)


def rr_variance(k: int, eps: float) -> float:
    p = 1.0 / (k - 1 + math.exp(eps))
    return _vector(math.exp(eps) * p, p, k, N)


def olh_variance(k: int, eps: float) -> float:
    g = math.floor(math.exp(eps) + 0.5) + 1
    keep = math.exp(eps) / (math.exp(eps) + g - 1)
    return _vector(keep, 1.0 / g, k, N)


def oue_variance(k: int, eps: float) -> float:
    return _vector(0.5, 1.0 / (math.exp(eps) + 1.0), k, N)


def ss_variance(k: int, eps: float, d: int) -> float:
    keep = d * math.exp(eps) / (d * math.exp(eps) + k - d)
    return _vector(keep, (keep * (d - 1) + (1 - keep) * d) / (k - 1), k, N)


def ss_best(k: int, eps: float) -> float:
    """The least SS variance over ``d = 2 .. k - 1`` (``d = 1`` is randomized response)."""
    return min((ss_variance(k, eps, d) for d in range(2, k)), default=math.inf)


def formula_choice(k: int, eps: float) -> str:
    """Least variance; an array output (SS, OUE) only if OLH's is more than 5% above it."""
    rr, olh = rr_variance(k, eps), olh_variance(k, eps)
    array = min(oue_variance(k, eps), ss_best(k, eps))
    if rr <= min(olh, array):
        return "randomized_response"
    if array < olh / 1.05:
        return "subset_selection" if ss_best(k, eps) <= oue_variance(k, eps) else "unary_encoding"
    return "local_hashing"


# issue 16's table: the best protocol at each point; where it names OUE, OLH is within 5%
# of it (1.0094 at eps 0.5, 1.0001 at eps 4): auto takes the smaller output. Issue 35 adds
# subset selection, 5.7-10% below OLH at k = 48 up to eps 2
TABLE = {
    (48, 0.5): "subset_selection",
    (48, 1.0): "subset_selection",
    (48, 2.0): "subset_selection",
    (48, 4.0): "randomized_response",
    (1000, 0.5): "local_hashing",
    (1000, 1.0): "local_hashing",
    (1000, 2.0): "local_hashing",
    (1000, 4.0): "local_hashing",
}


@pytest.mark.parametrize(("k", "eps"), sorted(TABLE))
def test_choice_at_the_issue_table_points(k: int, eps: float) -> None:
    variances = frequency_variances(k, eps)
    assert variances["randomized_response"] == pytest.approx(rr_variance(k, eps), rel=1e-9)
    assert variances["local_hashing"] == pytest.approx(olh_variance(k, eps), rel=1e-9)
    assert variances["unary_encoding"] == pytest.approx(oue_variance(k, eps), rel=1e-9)
    assert least_variance(variances) == TABLE[(k, eps)] == formula_choice(k, eps)
    # Wang et al.'s rule: randomized response only when k < 3 e^eps + 2
    rr = k < 3 * math.exp(eps) + 2
    assert (TABLE[(k, eps)] == "randomized_response") == rr


@pytest.mark.parametrize("eps", [0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0])
def test_choice_follows_the_variances_across_domain_sizes(eps: float) -> None:
    boundary = 3 * math.exp(eps) + 2
    for k in range(2, int(3 * boundary)):
        chosen = least_variance(frequency_variances(k, eps))
        assert chosen == formula_choice(k, eps), (k, eps)
        # Wang's boundary is RR against OLH; subset selection's d = k / (e^eps + 1) passes
        # 1.5 well below it (79 of 166 at eps 4): RR up to e^eps + 1 values, where d <= 1
        if k <= math.exp(eps) + 1:
            assert chosen == "randomized_response", (k, eps)
        if k >= boundary:
            assert chosen in ("local_hashing", "subset_selection"), (k, eps)


def test_delta_keeps_randomized_response_only() -> None:
    assert set(frequency_variances(1000, 1.0, 1e-6)) == {"randomized_response"}


def _plan(field: dict[str, Any], epsilon: float = 5.0) -> RecordPlan:
    return build_plan(parse_config(config_dict([field], epsilon=epsilon)))


DOMAIN = [f"v{i:02d}" for i in range(48)]
#: a domain where local hashing is within 5% of subset selection at eps 1 and 2: auto's OLH
WIDE = [f"v{i:03d}" for i in range(1000)]


def test_auto_is_the_default_and_picks_by_domain_size_and_epsilon() -> None:
    small = _plan({"name": "c", "kind": "categorical", "domain": ["a", "b", "c"], "epsilon": 1})
    large = _plan({"name": "c", "kind": "categorical", "domain": DOMAIN, "epsilon": 1})
    (s,), (g,) = small.fields, large.fields
    assert s.mechanism == "randomized_response"
    assert g.mechanism == "subset_selection"
    assert g.handler.mechanism is not None and g.handler.mechanism.name == "subset_selection"
    wide = _plan({"name": "c", "kind": "categorical", "domain": WIDE, "epsilon": 1}).fields[0]
    assert wide.mechanism == "local_hashing"


def test_choice_is_deterministic_and_stable_under_domain_reordering() -> None:
    rng = np.random.default_rng(7)
    field = {"name": "c", "kind": "categorical", "domain": DOMAIN, "epsilon": 1.0}
    first = _plan(field).fields[0]
    again = _plan(field).fields[0]
    assert first.release_id == again.release_id
    for _ in range(5):
        shuffled = [str(v) for v in rng.permutation(DOMAIN)]
        planned = _plan({**field, "domain": shuffled}).fields[0]
        assert (planned.kind, planned.mechanism) == (first.kind, first.mechanism)


def test_release_id_names_the_resolved_mechanism() -> None:
    auto_rr = {"name": "c", "kind": "categorical", "domain": ["a", "b"], "epsilon": 1.0}
    explicit_rr = {**auto_rr, "mechanism": "randomized_response"}
    # the same release (same mechanism, same parameters) keeps its id and its noise
    assert _plan(auto_rr).fields[0].release_id == _plan(explicit_rr).fields[0].release_id
    auto_ss = {**auto_rr, "domain": DOMAIN}
    rr_over_domain = {**auto_ss, "mechanism": "randomized_response"}
    assert _plan(auto_ss).fields[0].release_id != _plan(rr_over_domain).fields[0].release_id


def test_integer_domains_choose_among_randomized_response_and_the_array_outputs() -> None:
    """OLH hashes strings: for integer values SS and OUE are the candidates besides RR.

    SS is OUE's law restricted to outputs of ``d`` values: never above it here."""
    ints = _plan({"name": "c", "kind": "categorical", "domain": list(range(48)), "epsilon": 1})
    few = _plan({"name": "c", "kind": "categorical", "domain": [1, 2, 3], "epsilon": 1})
    assert ss_best(48, 1.0) < oue_variance(48, 1.0) < rr_variance(48, 1.0) / 4  # 4.6x
    assert ints.fields[0].mechanism == "subset_selection"
    assert few.fields[0].mechanism == "randomized_response"
    mixed = {"name": "c", "kind": "categorical", "domain": [*DOMAIN[:47], 7], "epsilon": 1}
    assert _plan(mixed).fields[0].mechanism == "subset_selection"
    wide = {"name": "c", "kind": "categorical", "domain": list(range(1000)), "epsilon": 1}
    assert _plan(wide).fields[0].mechanism == "subset_selection"  # no OLH to prefer


def test_integer_domain_choice_is_stable_under_reordering() -> None:
    rng = np.random.default_rng(11)
    field = {"name": "c", "kind": "categorical", "domain": list(range(48)), "epsilon": 1.0}
    first = _plan(field).fields[0]
    values = [int(v) for v in rng.integers(0, 48, size=50)]

    def released(planned: Any) -> list[Any]:
        parsed = [planned.handler.parse(v) for v in values]
        return list(planned.handler.release(parsed, SeededSource(3)).values)

    expected = released(first)
    for _ in range(3):
        shuffled = [int(v) for v in rng.permutation(48)]
        planned = _plan({**field, "domain": shuffled}).fields[0]
        assert (planned.kind, planned.mechanism) == (first.kind, first.mechanism)
        # canonical bit order: the same words give the same arrays, whatever the listing
        assert released(planned) == expected


def test_only_randomized_response_where_it_alone_fits() -> None:
    with_delta = build_plan(
        parse_config(
            config_dict(
                [
                    {
                        "name": "c",
                        "kind": "categorical",
                        "domain": DOMAIN,
                        "epsilon": 1,
                        "delta": 1e-6,
                    }
                ],
                epsilon=5.0,
                delta=1e-5,
            )
        )
    )
    open_domain = _plan({"name": "c", "kind": "categorical", "epsilon": 1})
    assert with_delta.fields[0].mechanism == "randomized_response"
    assert open_domain.fields[0].mechanism == "local_hashing"


def test_local_hashing_chosen_by_auto_enforces_the_domain() -> None:
    field = {"name": "c", "kind": "categorical", "domain": WIDE, "epsilon": 1.0}
    handler = _plan(field).fields[0].handler
    assert handler.parse("v007") == "v007"
    with pytest.raises(Rejected) as info:
        handler.parse("elsewhere")
    assert info.value.reason == "unknown_category"
    mapped = _plan({**field, "unknown_as": "v000"}).fields[0].handler
    assert mapped.parse("elsewhere") == "v000"


def test_memo_identity_works_with_auto_local_hashing() -> None:
    field = {
        "name": "c",
        "kind": "categorical",
        "domain": WIDE,
        "epsilon": 1.0,
        "memo_identity": "message_key",
    }
    (planned,) = _plan(field).fields
    assert planned.mechanism == "local_hashing"
    assert planned.memo is not None and planned.memo.identity_words == 1
    # the token holds the value itself, so the domain order cannot change it
    assert planned.memo.token(b"dev", "v003") == b"\x03\x00\x00\x00dev" + b'"v003"'


def _explain(tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, fields: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(
        "kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}\n"
        "privacy: {epsilon: 5}\nfields:\n" + fields,
        encoding="utf-8",
    )
    assert main(["explain", "--config", str(path), "--format", fmt]) == 0
    return capsys.readouterr().out


BIG = "[" + ", ".join(f"w{i}" for i in range(1000)) + "]"


def test_explain_shows_the_choice_and_each_candidate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fields = (
        f"  - {{name: big, kind: categorical, domain: {BIG}, epsilon: 1}}\n"
        "  - {name: small, kind: categorical, domain: [a, b, c], epsilon: 1}\n"
    )
    data = json.loads(_explain(tmp_path, capsys, "json", fields))
    big, small = data["fields"]
    assert big["mechanism"] == "local_hashing"
    assert big["auto"]["declared"] == "auto" and big["auto"]["chosen"] == "local_hashing"
    variances = big["auto"]["candidate_variances"]
    assert variances["randomized_response"] == pytest.approx(rr_variance(1000, 1.0), rel=1e-9)
    assert variances["local_hashing"] == pytest.approx(olh_variance(1000, 1.0), rel=1e-9)
    assert variances["unary_encoding"] == pytest.approx(oue_variance(1000, 1.0), rel=1e-9)
    assert small["auto"]["chosen"] == small["mechanism"] == "randomized_response"
    assert big["auto_warning"] is None and small["auto_warning"] is None
    table = _explain(tmp_path, capsys, "table", fields)
    assert "auto: big uses local_hashing" in table
    assert "auto: small uses randomized_response" in table
    assert "WARNING" not in table


def test_explain_warns_when_a_declared_mechanism_loses_by_more_than_1_5x(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fields = (
        f"  - {{name: big, kind: categorical, domain: {BIG}, epsilon: 1,"
        " mechanism: randomized_response}\n"
        "  - {name: small, kind: categorical, domain: [a, b, c], epsilon: 1,"
        " mechanism: randomized_response}\n"
    )
    data = json.loads(_explain(tmp_path, capsys, "json", fields))
    big, small = data["fields"]
    ratio = rr_variance(1000, 1.0) / olh_variance(1000, 1.0)  # about 187
    assert ratio > 1.5
    assert big["mechanism"] == "randomized_response"  # explicit wins
    assert f"{ratio:.3g}x" in big["auto_warning"]
    assert small["auto_warning"] is None  # randomized response is auto's own choice there
    table = _explain(tmp_path, capsys, "table", fields)
    assert table.count("WARNING: big: randomized_response has") == 1


ESTIMATE_CONFIG = f"""\
kafka: {{input_topic: raw, output_topic: clean, dead_letter_topic: dlq}}
privacy: {{epsilon: 2}}
fields:
  - {{name: page, kind: categorical, domain: [{", ".join(WIDE)}], epsilon: 2}}
"""


def test_estimate_end_to_end_on_an_auto_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """k = 1000 at eps 2: auto is local hashing; estimate takes the domain as candidates."""
    config = tmp_path / "config.yaml"
    config.write_text(ESTIMATE_CONFIG, encoding="utf-8")
    plan = build_plan(parse_config(yaml.safe_load(ESTIMATE_CONFIG)))
    assert plan.fields[0].mechanism == "local_hashing"
    rng = np.random.default_rng(16)
    weights = np.r_[np.full(4, 0.15), np.full(996, 0.4 / 996)]
    values = [str(v) for v in rng.choice(WIDE, size=6000, p=weights)]
    lines = [json.dumps({"page": v}).encode() for v in values]
    lines.append(b'{"page": "not-listed"}')  # outside the domain: dead-lettered
    out = io.BytesIO()
    summary = sanitize_stream(plan, lines, out, str(tmp_path / "dead.jsonl"), SeededSource(5))
    assert summary.reasons == {"unknown_category": 1}
    released = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(released) == 6000 and set(released[0]["page"]) == {"seed", "bucket"}
    (tmp_path / "clean.jsonl").write_bytes(out.getvalue())
    write_sidecar(sidecar_path(str(tmp_path / "clean.jsonl")), plan, len(released))
    raw = tmp_path / "raw.jsonl"
    raw.write_bytes(b"\n".join(lines[:-1]) + b"\n")
    code = main(
        [
            "estimate",
            "--config",
            str(config),
            "--input",
            str(tmp_path / "clean.jsonl"),
            "--truth",
            str(raw),
            "--format",
            "json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    (page,) = report["fields"]
    assert [row["value"] for row in page["frequencies"]] == WIDE
    # 5 standard errors per value: false failure below 1000 * 6e-7 ~ 6e-4 for a random seed
    for row in page["frequencies"]:
        assert abs(row["estimate"] - row["true"]) < 5 * row["stderr"], row


def test_audit_target_of_auto_local_hashing_uses_domain_values() -> None:
    (planned,) = _plan({"name": "c", "kind": "categorical", "domain": WIDE, "epsilon": 1}).fields
    target = target_for(planned)
    assert target.inputs == ("v000", "v001")  # values the field accepts, not outside ones
    for value in target.inputs:
        assert planned.handler.parse(value) == value
