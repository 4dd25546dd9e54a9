"""``privacy.subject`` and ``privacy.ledger``: durations, windows, subject kind, admissible caps."""

from __future__ import annotations

import re
from typing import Any

import pytest
from privstream.cli.main import main
from privstream.config import parse_config
from privstream.config.ledger import parse_duration
from privstream.errors import ConfigError

from tests.support.configs import config_dict

FIELDS: list[dict[str, Any]] = [
    {"name": "device_id", "kind": "drop"},
    {"name": "ts", "kind": "public"},
    {"name": "hr", "kind": "integer", "bounds": [30, 220], "epsilon": 0.5},
]


def ledger_config(privacy: dict[str, Any], **ledger: Any) -> dict[str, Any]:
    data = config_dict([dict(f) for f in FIELDS], epsilon=0.5)
    data["privacy"].update(privacy)
    if ledger:
        data["privacy"]["ledger"] = {"window": "1d", "epsilon": 4.0, **ledger}
    return data


def problems_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return info.value.problems


@pytest.mark.parametrize(
    ("text", "ms"), [("30s", 30_000), ("5m", 300_000), (" 1h ", 3_600_000), ("7d", 604_800_000)]
)
def test_durations_parse_to_milliseconds(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["1", "1w", "1.5h", 3600, "-1h", ""])
def test_bad_durations_say_how_to_write_one(text: object) -> None:
    with pytest.raises(ValueError, match=re.escape('e.g. "30s", "5m", "1h", "1d"')):
        parse_duration(text)


def test_a_ledger_config_loads_and_dumps_back_as_written() -> None:
    config = parse_config(ledger_config({"subject": "device_id"}, grace="2h", lifetime_epsilon=50))
    ledger = config.privacy.ledger
    assert ledger is not None
    assert (ledger.window, ledger.grace, ledger.max_future) == (86_400_000, 7_200_000, 300_000)
    dumped = config.model_dump(mode="json")
    assert dumped["privacy"]["ledger"]["window"] == "1d"
    assert parse_config(dumped) == config


@pytest.mark.parametrize("window", ["7h", "25h", "7m"])
def test_windows_must_follow_utc_calendar_windows(window: str) -> None:
    [problem] = problems_of(ledger_config({"subject": "device_id"}, window=window))
    assert problem.startswith("privacy.ledger.window:")
    assert "neither divides a day nor is a whole number of days" in problem


def test_caps_beyond_any_privacy_are_refused() -> None:
    [problem] = problems_of(ledger_config({"subject": "device_id"}, lifetime_epsilon=2e6))
    assert problem.startswith("privacy.ledger.lifetime_epsilon: 2e+06 is above 1e+06")


def test_the_ledger_requires_a_subject() -> None:
    [problem] = problems_of(ledger_config({}, epsilon=4.0))
    assert problem.startswith("privacy.ledger: a ledger charges each subject: set privacy.subject")


def test_the_subject_must_be_a_listed_field_of_kind_drop() -> None:
    [missing] = problems_of(ledger_config({"subject": "user"}))
    assert missing.startswith("privacy.subject: no field named 'user'")
    [public] = problems_of(ledger_config({"subject": "ts"}))
    assert "field 'ts' is of kind public" in public
    assert "privacy.subject_public: true" in public
    parse_config(ledger_config({"subject": "ts", "subject_public": True}))
    [noised] = problems_of(ledger_config({"subject": "hr", "subject_public": True}))
    assert "field 'hr' is of kind integer, but the subject identifier is never noised" in noised


def test_per_window_caps_must_admit_one_record() -> None:
    [problem] = problems_of(ledger_config({"subject": "device_id"}, epsilon=0.4))
    assert problem == (
        "privacy.ledger.epsilon: one record costs epsilon 0.5 > cap 0.4, so no record could "
        "ever be released; raise privacy.ledger.epsilon or lower the record's budget "
        "(privacy.epsilon, the fields' shares)"
    )
    data = ledger_config({"subject": "device_id", "delta": 1e-6}, lifetime_epsilon=0.3)
    data["fields"][2]["delta"] = 1e-6
    assert [p.split(":")[0] for p in problems_of(data)] == [
        "privacy.ledger.delta",
        "privacy.ledger.lifetime_epsilon",
    ]


def test_an_inadmissible_cap_exits_2(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(ledger_config({"subject": "device_id"}, epsilon=0.1)))
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", "--config", str(path)])
    assert exit_info.value.code == 2
    assert "one record costs epsilon 0.5 > cap 0.1" in capsys.readouterr().err
