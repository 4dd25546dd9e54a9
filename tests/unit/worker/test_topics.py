"""No aiokafka client of the worker lets a broker create a topic it names.

The topic checks themselves (missing input, a changelog of the wrong shape or
configs) run against a real broker with auto-creation on:
tests/integration/test_topics_and_clock.py and tests/integration/test_ledger.py.
"""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import aiokafka.admin.client
import aiokafka.client
import pytest
from aiokafka.protocol.metadata import MetadataRequest_v4, MetadataRequest_v5
from privstream.ledger import codec
from privstream.worker import clients

from tests.unit.worker.test_ledger_store import store


@pytest.mark.parametrize("module", [aiokafka.client, aiokafka.admin.client])
@pytest.mark.parametrize("version", [MetadataRequest_v4, MetadataRequest_v5])
def test_every_metadata_request_of_a_client_asks_for_no_auto_creation(
    module: object, version: type
) -> None:
    request = module.MetadataRequest(["t"])  # type: ignore[attr-defined]
    assert request.build(version).allow_auto_topic_creation is False


def test_an_aiokafka_that_no_longer_builds_its_requests_there_stops_the_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A renamed request class would silently bring auto-creation back: refused at import."""
    monkeypatch.setattr(aiokafka.client, "MetadataRequest", SimpleNamespace())
    with pytest.raises(ImportError, match=r"aiokafka\.client "):
        clients._forbid_topic_auto_creation()


def test_a_restored_changelog_clock_far_ahead_is_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Written by a fast replica before the clock checks: the restore says so."""
    s = store("drop")
    ahead = int(time.time() * 1000) + 30 * 86_400_000
    s.ledger.restore(0, [(codec.CLOCK_KEY, codec.encode_int(ahead))])
    with caplog.at_level(logging.WARNING, logger="privstream.worker"):
        s._warn_if_ahead(0)
        s.ledger.restore(1, [(codec.CLOCK_KEY, codec.encode_int(ahead - 30 * 86_400_000))])
        s._warn_if_ahead(1)
    assert [r.getMessage()[:40] for r in caplog.records] == [
        f"ledger changelog {s.topic} partition 0"[:40]
    ]
    assert "ahead of this replica's" in caplog.records[0].getMessage()
