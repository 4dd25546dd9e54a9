"""Generate app events of the kind every product team emits, one JSON object per line.

    python3 examples/app_events.py --records 5000 --seed 32 > app-events.jsonl

Each event has a user id, an ISO 8601 time (with a UTC offset, in a few
zones, some with milliseconds), an event type, a country (some outside the
config's domain), the device it came from as a nested object (its `os` and
`app_version`; the whole object absent in about 3% of the events and null in
about 2%, its `app_version` missing in about 4% of the rest), a latency in
milliseconds that is null in about 3% of the events and absent in about 2%, a
cart value on purchases only, and a list of tags (absent in about 1%). The
standard library only, so it runs with any Python 3.11+; the same seed gives
the same file. docs/real-event-data.md sanitizes it with
examples/app-events.yaml.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from datetime import UTC, datetime, timedelta, timezone

EVENTS = {"view": 0.55, "click": 0.25, "add_to_cart": 0.12, "purchase": 0.08}
COUNTRIES = {"US": 0.4, "DE": 0.2, "FR": 0.15, "GB": 0.15, "BR": 0.1}  # BR: not in the domain
OSES = {"android": 0.5, "ios": 0.4, "web": 0.1}
VERSIONS = {"5.2.1": 0.45, "5.2.0": 0.25, "5.1.3": 0.2, "5.0.9": 0.1}
TAGS = ["mobile", "web", "promo", "returning", "beta"]
ZONES = [timezone.utc, timezone(timedelta(hours=1)), timezone(timedelta(hours=-5))]
START = datetime(2026, 11, 1, tzinfo=UTC)


def pick(rng: random.Random, weights: dict[str, float]) -> str:
    return rng.choices(list(weights), list(weights.values()))[0]


def device(rng: random.Random) -> dict[str, str] | None:
    """The sending device, or None for a null object; some clients send no app version."""
    if rng.random() < 0.02:
        return None
    found = {"os": pick(rng, OSES), "app_version": pick(rng, VERSIONS)}
    if rng.random() < 0.04:
        del found["app_version"]
    return found


def event(rng: random.Random, seq: int) -> dict[str, object]:
    at = START + timedelta(seconds=rng.randrange(7 * 86_400), milliseconds=rng.randrange(1000))
    local = at.astimezone(rng.choice(ZONES))
    kind = pick(rng, EVENTS)
    record: dict[str, object] = {
        "user_id": f"u{rng.randrange(800):04d}",
        "ts": local.isoformat(timespec="milliseconds" if seq % 2 else "seconds"),
        "event": kind,
        "country": pick(rng, COUNTRIES),
        "device": device(rng),
        "latency_ms": round(rng.lognormvariate(5.0, 0.6), 1),
    }
    if rng.random() < 0.03:
        del record["device"]
    gap = rng.random()
    if gap < 0.03:
        record["latency_ms"] = None
    elif gap < 0.05:
        del record["latency_ms"]
    if kind == "purchase":
        record["cart_value"] = round(rng.lognormvariate(3.8, 0.7), 2)
    if rng.random() >= 0.01:
        record["tags"] = rng.sample(TAGS, rng.randrange(4))
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=32)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    for seq in range(args.records):
        sys.stdout.write(json.dumps(event(rng, seq)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
