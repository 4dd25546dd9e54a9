"""Red team: the sanitized topic's headers cannot tell two calibrations of one config apart.

Every sanitized message carries ``privstream-config-sha256``, the hash of the
config's ``privacy`` and ``fields`` as written. ``mechanism: auto`` is part of
that text, but what it resolves to is not: a privstream upgrade that changes
auto's choice (adding piecewise and hybrid did, for real fields) or a
calibration releases the same config hash with another mechanism. File mode
guards against this (``metadata.check_metadata`` compares each field's mechanism
and parameters "since a privstream version may calibrate the same config
differently"); the topic path (``estimate --topic``, ``check_topic_read``) only
compares the hash, so an analyst who reads the topic across the upgrade gets
the old records decoded with the new mechanism's estimators, silently.
"""

from __future__ import annotations

from privstream.config import parse_config
from privstream.kinds import build_plan, plan
from privstream.worker.produce import output_headers

CONFIG = {
    "kafka": {"input_topic": "raw", "output_topic": "clean", "dead_letter_topic": "dlq"},
    "privacy": {"epsilon": 1.0, "delta": 1e-6},
    "fields": [
        {"name": "x", "kind": "real", "bounds": [0, 100], "mechanism": "auto", "epsilon": 1.0}
    ],
}


def test_headers_differ_when_auto_resolves_to_another_mechanism(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = parse_config(CONFIG)
    today = build_plan(config)
    chosen = today.fields[0].handler.mechanism.name  # type: ignore[union-attr]
    other = "laplace" if chosen != "laplace" else "piecewise"
    # an earlier (or later) privstream whose auto picks another mechanism for this config
    monkeypatch.setattr(
        plan, "resolve_auto", lambda spec, share: spec.model_copy(update={"mechanism": other})
    )
    then = build_plan(config)
    assert then.fields[0].handler.mechanism.name == other  # type: ignore[union-attr]
    assert then.config_sha256 == today.config_sha256
    assert output_headers(then) != output_headers(today)


class _Message:
    """A consumed record as ``read_topic`` sees one (headers and a value)."""

    def __init__(self, headers: list[tuple[str, bytes]]) -> None:
        self.headers = headers
        self.value = b'{"x": 1.0}'
        self.partition = 0


def test_estimate_skips_records_of_the_same_config_calibrated_otherwise(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from privstream.estimate.source import Expected, TopicRead, _deliver

    config = parse_config(CONFIG)
    today = build_plan(config)
    monkeypatch.setattr(
        plan, "resolve_auto", lambda spec, share: spec.model_copy(update={"mechanism": "laplace"})
    )
    then = build_plan(config)
    expected = Expected(today.config_sha256, today.release_sha256)
    read, sunk, skipped = TopicRead("clean"), [], []
    for released in (today, then):
        _deliver(_Message(output_headers(released)), read, expected, sunk.append, skipped.append)
    older = [
        (k, v)
        for k, v in output_headers(today)
        if k not in ("privstream-release-sha256", "privstream-field-releases")
    ]
    _deliver(_Message(older), read, expected, sunk.append, skipped.append)  # before the header
    same = today.release_sha256 == then.release_sha256
    assert skipped == ([] if same else ["config_mismatch"])
    assert len(sunk) == (3 if same else 2)
