"""The per-subject ledger's settings: ``privacy.subject`` and ``privacy.ledger``.

Durations are written ``<integer><unit>`` with unit ``s``, ``m``, ``h`` or
``d`` (``30s``, ``5m``, ``1h``, ``1d``) and parsed once, into milliseconds.
Windows are aligned on the UTC epoch: a window must divide a day (then every
window starts at a UTC multiple of its length within the day, e.g. ``6h``
windows start at 00:00, 06:00, 12:00, 18:00 UTC) or be a whole number of days
(``7d`` windows start every 7 days from 1970-01-01, a Thursday).

The semantics and the proof of the guarantee are in ``docs/ledger.md``.
"""

# no ``from __future__ import annotations``: pydantic would compile every field's
# annotation from its text at start-up (about 2.5 ms of every command, docs/benchmarks.md)
import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, PlainSerializer, WithJsonSchema

from privstream.config.fields import Delta, Epsilon, Strict

#: milliseconds per duration unit
UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
DAY_MS = UNIT_MS["d"]
#: caps above this are no privacy at all; the bound keeps the integer accounting in int64
MAX_LEDGER_EPSILON = 1.0e6
_DURATION = re.compile(r"^\s*(\d{1,9})\s*([smhd])\s*$")


def parse_duration(value: object) -> int:
    """``"1d"`` -> 86_400_000: a duration in milliseconds; a ValueError naming the fix."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match is not None:
            return int(match.group(1)) * UNIT_MS[match.group(2)]
    raise ValueError(
        f"{value!r} is not a duration; write an integer and a unit s, m, h or d, "
        'e.g. "30s", "5m", "1h", "1d"'
    )


def format_duration(ms: int) -> str:
    """The shortest ``<integer><unit>`` spelling of a whole number of seconds (``"1d"``)."""
    for unit in ("d", "h", "m", "s"):
        if ms % UNIT_MS[unit] == 0:
            return f"{ms // UNIT_MS[unit]}{unit}"
    return f"{ms}ms"


def _window(value: object) -> int:
    ms = parse_duration(value)
    if ms <= 0 or (DAY_MS % ms != 0 and ms % DAY_MS != 0):
        raise ValueError(
            f"window {value!r} neither divides a day nor is a whole number of days, so it "
            "cannot follow UTC calendar windows; use e.g. 1h, 6h, 1d or 7d"
        )
    return ms


_DURATION_SCHEMA = WithJsonSchema({"type": "string", "pattern": r"^\s*\d{1,9}\s*[smhd]\s*$"})
#: written back as "5m" so that a dumped config loads again (and hashes as written)
_AS_TEXT = PlainSerializer(format_duration, return_type=str)
#: a duration in milliseconds, written "5m" in YAML
Duration = Annotated[int, BeforeValidator(parse_duration), _AS_TEXT, _DURATION_SCHEMA]
WindowDuration = Annotated[int, BeforeValidator(_window), _AS_TEXT, _DURATION_SCHEMA]


def _ledger_epsilon(value: float) -> float:
    if value > MAX_LEDGER_EPSILON:
        raise ValueError(
            f"{value:g} is above {MAX_LEDGER_EPSILON:g}, which bounds no privacy loss at all "
            "(and keeps the ledger's integer units in 64 bits); give a cap of at most 1e6"
        )
    return value


LedgerEpsilon = Annotated[Epsilon, AfterValidator(_ledger_epsilon)]


class LedgerConfig(Strict):
    """A cap per subject per UTC window (and optionally over the subject's lifetime)."""

    #: length of the UTC-aligned windows, e.g. "1h", "1d", "7d"
    window: WindowDuration
    #: per subject per window: the released records' epsilons sum to at most this
    epsilon: LedgerEpsilon
    #: per subject per window: their deltas sum to at most this (0 when records are pure)
    delta: Delta = 0.0
    #: per subject over all windows, for as long as the changelog lives (None: no cap)
    lifetime_epsilon: LedgerEpsilon | None = None
    #: a record over a cap: dropped (counted), or dead-lettered with reason budget_exhausted
    over_budget: Literal["drop", "dead_letter"] = "drop"
    #: late records are accepted until their window's end plus this
    grace: Duration = Field(default="1h", validate_default=True)
    #: records stamped further ahead of the clock than this are suppressed
    max_future: Duration = Field(default="5m", validate_default=True)
    #: compacted, co-partitioned with the input (default "<input topic>-privstream-ledger")
    changelog_topic: str | None = Field(default=None, min_length=1)
    #: windows follow this field's released time (a timestamp field without epsilon)
    #: instead of the Kafka timestamp (``time_problems``, docs/ledger.md)
    time: str | None = Field(default=None, min_length=1)


#: the default changelog topic is the input topic's name with this suffix
CHANGELOG_SUFFIX = "-privstream-ledger"
#: the longest topic name Kafka creates
MAX_TOPIC_NAME = 249


def topic_name_problem(name: str) -> str | None:
    """Why Kafka refuses ``name`` as a topic name, or None (its ``Topic.validate``)."""
    if name in (".", ".."):
        return f"{name!r} is no Kafka topic name"
    if len(name) > MAX_TOPIC_NAME:
        return f"{len(name)} characters; Kafka topic names have at most {MAX_TOPIC_NAME}"
    legal = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    if not name or not set(name) <= legal:
        return "Kafka topic names use only ASCII letters, digits, '.', '_' and '-'"
    return None


def changelog_problems(topics: Mapping[str, str], ledger: LedgerConfig | None) -> list[str]:
    """The changelog (named, or the default ``<input>-privstream-ledger``) must be a topic
    of its own: ``topics`` maps each kafka setting to the topic it names."""
    if ledger is None:
        return []
    topic = ledger.changelog_topic or f"{topics['input_topic']}{CHANGELOG_SUFFIX}"
    setting = "privacy.ledger.changelog_topic" + ("" if ledger.changelog_topic else " (default)")
    problem = topic_name_problem(topic)
    if problem is not None:
        return [f"{setting} {topic[:60]!r}: {problem}; name another privacy.ledger.changelog_topic"]
    return [
        f"{setting} {topic!r} is kafka.{name}: the changelog must be a topic of its own "
        "(compacted by subject, holding each subject's key and spending: as the output it "
        "would publish them and compact the sanitized records away); name another topic"
        for name, other in topics.items()
        if other == topic
    ]


def subject_problems(
    subject: str | None, public: bool, ledger: LedgerConfig | None, kinds: Mapping[str, str]
) -> list[tuple[str, str]]:
    """(setting, message) for each problem of ``privacy.subject`` given the fields' kinds."""
    if subject is None:
        if ledger is not None:
            return [
                (
                    "ledger",
                    "a ledger charges each subject: set privacy.subject to the "
                    "field that identifies the individual (e.g. device_id, kind drop)",
                )
            ]
        return [("subject_public", "applies to privacy.subject only; remove it")] if public else []
    if subject not in kinds:
        return [
            (
                "subject",
                f"no field named {subject!r}; list the field that identifies the "
                "individual (kind drop keeps it out of the output) or fix the name",
            )
        ]
    allowed = ("drop", "public") if public else ("drop",)
    if kinds[subject] not in allowed:
        fix = "make it kind drop (or public with privacy.subject_public: true)"
        if not public:
            fix = "make it kind drop, or set privacy.subject_public: true if the id is public"
        return [
            (
                "subject",
                f"field {subject!r} is of kind {kinds[subject]}, but the subject "
                f"identifier is never noised; {fix}",
            )
        ]
    return []


#: integer units per unit of epsilon: costs round up, caps down (exact, conservative)
EPSILON_UNITS = 10**9
#: integer units per unit of delta (delta < 1, so every delta cap fits in int64)
DELTA_UNITS = 10**18


def cost_units(value: float | Fraction, per: int) -> int:
    """``ceil(value * per)``, computed exactly on the value's rational value."""
    return -((-Fraction(value) * per).__floor__())


def cap_units(value: float, per: int) -> int:
    """``floor(value * per)``, computed exactly on the double's rational value."""
    return (Fraction(value) * per).__floor__()


def time_problems(ledger: LedgerConfig | None, fields: Sequence[Any]) -> list[str]:
    """Why ``privacy.ledger.time`` cannot give the windows, given the fields (read by
    attribute). Which window a record is charged to, and whether it is late or in the
    future, decides its release: so the time must be one the output shows as is (a
    timestamp without epsilon), present in every released record (``on_missing:
    dead_letter``), and cut to units that lie whole inside one window."""
    if ledger is None or ledger.time is None:
        return []
    name = ledger.time
    spec = next((f for f in fields if f.name == name), None)
    if spec is None:
        return [f"no field named {name!r}; name a field of kind timestamp or fix the name"]
    if spec.kind != "timestamp":
        return [
            f"field {name!r} is of kind {spec.kind}: the ledger reads a time in a declared "
            "format; declare it kind: timestamp without epsilon (granularity: 1s keeps the "
            "second), which releases it truncated as is"
        ]
    if spec.epsilon is not None:
        return [
            f"field {name!r} is noised (epsilon): the window a record is charged to, and "
            "whether it is late, would depend on its raw time, which its noise protects; "
            "release the time without epsilon, or leave privacy.ledger.time out (Kafka "
            "timestamps)"
        ]
    problems = []
    if spec.on_missing != "dead_letter":
        problems.append(
            f"field {name!r} has on_missing: {spec.on_missing}: a record without a time "
            "has no window to be charged to; use on_missing: dead_letter (such records "
            "are dead-lettered naming the field)"
        )
    if ledger.window % (spec.unit_us // 1000) != 0:
        problems.append(
            f"field {name!r} has granularity {spec.granularity}, which does not divide "
            f"window {format_duration(ledger.window)}: a unit would straddle windows and be "
            "charged to the one holding its start; use a granularity that divides the window"
        )
    return problems
