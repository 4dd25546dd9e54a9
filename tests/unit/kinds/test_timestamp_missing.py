"""Absent and null times: ``on_missing`` on ``timestamp`` fields (issue 32, item 3).

The value-independence of the release decision and shape for every mode is
checked with the other kinds in ``tests/unit/pipeline/test_on_missing.py``
(its ``timestamp`` case). Here: the DP inequality of a present against an
absent time (impute + presence bit), the public variant (null only), the
config rules, and ``estimate`` over the present times of a file, with a
seeded noise source (each interval check at 5 stderrs: a false failure below
6e-7 per check for a random seed).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from privstream.cli.explain import explain
from privstream.cli.main import main
from privstream.config import config_sha256, parse_config
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.mechanisms.integer_laplace import IntegerLaplaceMechanism
from privstream.mechanisms.randomized_response import RandomizedResponse
from privstream.pipeline import noise, process_batch
from privstream.pipeline.missing import MissingHandler
from privstream.testing import SeededSource

from tests.support.configs import config_dict

JAN = ["2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"]  # 24 hourly units
NOISED = {"name": "ts", "kind": "timestamp", "granularity": "1h", "bounds": JAN, "epsilon": 0.8}
PUBLIC = {"name": "ts", "kind": "timestamp", "granularity": "1h"}


def field(base: dict[str, Any], **options: Any) -> dict[str, Any]:
    return {**base, **options}


def parse(*fields: dict[str, Any], epsilon: float = 2.0, **privacy: Any) -> Any:
    data = config_dict(list(fields), epsilon=epsilon)
    data["privacy"].update(privacy)
    return parse_config(data)


def test_present_and_absent_times_satisfy_the_dp_inequality() -> None:
    """A record holding any time (inside the bounds or clamped into them) against one
    without it (imputed as 12:00, plus the presence bit): for every output pair,
    P(out | one) <= e^(0.8 + 0.3) P(out | other); the bit spends exactly 0.3."""
    spec = field(NOISED, on_missing="impute", impute="2026-01-01T12:00:00Z", presence_epsilon=0.3)
    plan = build_plan(parse(spec, epsilon=1.1))
    value, bit = (planned.handler for planned in plan.fields)
    assert isinstance(value, MissingHandler) and value.parsed_stand_in == value.parse(None)
    laplace, rr = value.mechanism, bit.mechanism
    assert isinstance(laplace, IntegerLaplaceMechanism) and laplace.noise is not None
    assert isinstance(rr, RandomizedResponse)
    lo, hi = laplace.lower, laplace.upper
    outputs = np.arange(lo - 300, hi + 300)

    def log_pmf(x: int) -> Any:  # discrete Laplace around the clamped index, up to a constant
        return -np.abs(outputs - min(max(x, lo), hi)) / laplace.noise.t  # type: ignore[union-attr]

    keep, flip = rr.params()["keep_probability"], rr.params()["p"]
    bit_loss = abs(np.log(keep) - np.log(flip))
    absent = log_pmf(value.parsed_stand_in)
    worst = max(float(np.max(np.abs(log_pmf(x) - absent))) for x in range(lo - 1, hi + 2))
    assert bit_loss == pytest.approx(0.3)
    # 12:00 is 12 of the 24 units from either end: half the field's epsilon at worst
    assert worst == pytest.approx(0.8 * 12 / 24)
    assert worst + bit_loss <= 1.1 + 1e-12
    # any two present times (the first and the last unit): the field's whole epsilon
    assert float(np.max(np.abs(log_pmf(lo) - log_pmf(hi)))) == pytest.approx(0.8)
    assert plan.epsilon == pytest.approx(1.1)  # the bit is charged to the record


def test_a_public_timestamp_releases_null_exactly_where_the_time_is_missing() -> None:
    plan = build_plan(parse(field(PUBLIC, on_missing="null")))
    messages = [b'{"ts":"2026-01-01T05:59:00Z"}', b'{"ts":null}', b"{}", b'{"ts":0}']
    result = process_batch(plan, messages, SeededSource(0))
    assert result.dead_letters == []
    released = [json.loads(text)["ts"] for text in result.outputs]
    assert released == ["2026-01-01T05:00:00Z", None, None, "1970-01-01T00:00:00Z"]
    # an unparseable time is still dead-lettered: on_missing is about absent and null only
    bad = process_batch(plan, [b'{"ts":"soon"}'], SeededSource(0))
    assert [d.reason for d in bad.dead_letters] == ["bad_timestamp"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (field(PUBLIC, on_missing="impute", impute=0), "released the imputed time as is|as is"),
        (field(NOISED, on_missing="impute"), "needs impute"),
        (field(NOISED, on_missing="impute", impute="2026-02-01T00:00:00Z"), "outside the"),
        (field(NOISED, on_missing="impute", impute="2026-01-01T03:00:00"), "no UTC offset"),
        (field(NOISED, on_missing="impute", impute=True), "ISO 8601 text or an epoch number"),
        (field(NOISED, on_missing="impute", impute=[1]), "ISO 8601 text or an epoch number"),
        (field(NOISED, on_missing="null", presence_epsilon=0.5), "impute only"),
        (field(NOISED, impute="2026-01-01T03:00:00Z"), "on_missing: impute only"),
    ],
)
def test_config_errors(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(spec)


def test_accepted_imputes_epoch_numbers_and_naive_text_under_assume_utc() -> None:
    epoch = datetime(2026, 1, 1, 3, tzinfo=UTC).timestamp()
    for options in (
        {"impute": int(epoch)},
        {"impute": epoch * 1000, "epoch_unit": "ms"},
        {"impute": "2026-01-01T03:00:00", "assume_utc": True},
    ):
        plan = build_plan(parse(field(NOISED, on_missing="impute", **options)))
        handler = plan.handlers[0]
        assert isinstance(handler, MissingHandler)
        assert handler.parsed_stand_in == handler.parse("2026-01-01T03:00:00Z")


def test_null_presence_needs_presence_public_under_a_subject() -> None:
    subject = {"name": "user", "kind": "drop"}
    for spec in (field(PUBLIC, on_missing="null"), field(NOISED, on_missing="null")):
        with pytest.raises(ConfigError, match="presence_public: true"):
            parse(subject, spec, subject="user")
        parse(subject, field(spec, presence_public=True), subject="user")
    text = explain(*_planned(parse(field(PUBLIC, on_missing="null"))), "table")
    assert "PUBLIC PRESENCE: ts absent or null is released as null" in " ".join(text.split())


def _planned(config: Any) -> tuple[Any, Any]:
    return config, build_plan(config)


CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 3}
fields:
  - {name: seen, kind: timestamp, granularity: 1h, bounds: ["JAN0", "JAN1"], epsilon: 2,
     on_missing: impute, impute: "2026-01-01T00:00:00Z", presence_epsilon: 1}
"""


def test_estimate_over_the_present_times_of_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """6,000 events, 10% without a time (half null, half absent), imputed as the first unit:
    0 dead letters; the presence share and the mean unit over the present times are within
    5 stderrs of the truth, and the plain mean (imputed ones counted, about 2 units or 9
    stderrs lower) is not."""
    rng = np.random.default_rng(5)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    records: list[dict[str, Any]] = []
    hours: list[int] = []
    for i in range(6_000):
        gap = rng.random()
        if gap < 0.05:
            records.append({"seen": None})
        elif gap < 0.10:
            records.append({"i": i})
        else:
            hour = int(rng.integers(18, 24))
            minute = int(rng.integers(0, 60))
            records.append({"seen": (start + timedelta(hours=hour, minutes=minute)).isoformat()})
            hours.append(hour)
    (tmp_path / "c.yaml").write_text(CONFIG.replace("JAN0", JAN[0]).replace("JAN1", JAN[1]))
    raw, out = tmp_path / "raw.jsonl", tmp_path / "out.jsonl"
    raw.write_text("".join(json.dumps(r) + "\n" for r in records))
    monkeypatch.setattr(noise, "KernelSeededAes", lambda: SeededSource(11))
    args = ["--config", str(tmp_path / "c.yaml")]
    dead = tmp_path / "dead.jsonl"
    files = ["--input", str(raw), "--output", str(out), "--dead-letter", str(dead)]
    assert main(["sanitize", *args, *files]) == 0 and not dead.exists()
    capsys.readouterr()
    assert main(["estimate", *args, "--input", str(out), "--format", "json"]) == 0
    fields = {e["name"]: e for e in json.loads(capsys.readouterr().out)["fields"]}
    present = fields["seen"]["present"]
    unit0 = int(start.timestamp()) // 3600
    share, mean = present["share"], present["mean"]
    assert abs(share["estimate"] - len(hours) / 6_000) <= 5 * share["stderr"]
    assert abs(mean["estimate"] - (unit0 + np.mean(hours))) <= 5 * mean["stderr"]
    plain = fields["seen"]["mean"]
    assert abs(plain["estimate"] - (unit0 + np.mean(hours))) > 5 * plain["stderr"]


def test_a_timestamp_without_the_new_options_keeps_its_hash_and_release_id() -> None:
    """Pinned from before on_missing reached timestamps: the defaults are left out of both."""
    spec = field(NOISED, bounds=["2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"], epsilon=1.0)
    spec["name"] = "t"
    config = parse(spec, epsilon=1.0)
    assert config_sha256(config) == (
        "f68f25027b8f190a4d6c7c0f8a41fce8ce73be16b0302626bf09a288aa95405a"
    )
    assert build_plan(config).fields[0].release_id.hex() == (
        "4f27b3e16374e868cf7576cb2a771a82ed345cc41c7722d68a3909134e82b404"
    )


def test_estimate_skips_null_times_as_null(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A noised timestamp under on_missing: null: nulls are counted as skipped.null, and the
    mean unit over the present times covers the truth (5 stderrs)."""
    config = CONFIG.replace("JAN0", JAN[0]).replace("JAN1", JAN[1])
    config = config.replace(
        'on_missing: impute, impute: "2026-01-01T00:00:00Z", presence_epsilon: 1',
        'on_missing: "null"',
    )
    (tmp_path / "c.yaml").write_text(config)
    hours = [h % 24 for h in range(3_000)]
    records = [
        {"seen": f"2026-01-01T{h:02d}:30:00Z"} if i % 10 else {} for i, h in enumerate(hours)
    ]
    raw, out = tmp_path / "raw.jsonl", tmp_path / "out.jsonl"
    raw.write_text("".join(json.dumps(r) + "\n" for r in records))
    monkeypatch.setattr(noise, "KernelSeededAes", lambda: SeededSource(12))
    args = ["--config", str(tmp_path / "c.yaml")]
    files = ["--input", str(raw), "--output", str(out), "--dead-letter", str(tmp_path / "d")]
    assert main(["sanitize", *args, *files]) == 0
    released = [json.loads(line)["seen"] for line in out.read_text().splitlines()]
    assert [i for i, v in enumerate(released) if v is None] == list(range(0, 3_000, 10))
    capsys.readouterr()
    assert main(["estimate", *args, "--input", str(out), "--format", "json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["fields"]
    assert entry["skipped"] == {"null": 300}
    present = [h for i, h in enumerate(hours) if i % 10]
    unit0 = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp()) // 3600
    mean = entry["mean"]
    assert abs(mean["estimate"] - (unit0 + np.mean(present))) <= 5 * mean["stderr"]
