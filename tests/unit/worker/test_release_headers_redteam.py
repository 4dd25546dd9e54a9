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
