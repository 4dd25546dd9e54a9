"""The changelog's record encoding, version 1.

The ledger of one input partition is the compacted changelog partition of
the same number: replaying it in offset order (a ``None`` value -- a
tombstone -- deletes the key; ``W``, ``L`` and ``E`` keep their largest value
since, the others their last: ``state._keep_max``) gives back the ledger.
Every key starts with the version byte ``0x01`` and a type byte; integers
are signed 64-bit big-endian (``>q``)::

    key                                          value
    01 'W' start_ms:q window_ms:q subject        eps_units:q delta_units:q
    01 'L' subject                               eps_units:q
    01 'C'                                       clock_ms:q
    01 'E'                                       closed_ms:q
    01 'N'                                       canonical JSON {"released": n, <reason>: n}
    01 'D' deployment                            01
    01 'K'                                       01
    01 'A' ledger_start_ms:q ledger_window_ms:q  kept_until_ms:q admitted:B
           aggregate_start_ms:q id_length:B partial_id subject

* ``W``: what a subject spent in the UTC window ``[start_ms, start_ms +
  window_ms)``, in units of ``1e-9`` epsilon and ``1e-18`` delta
  (``privstream.config.ledger``). Tombstoned once the window has expired.
* ``L``: what a subject spent over its lifetime (only with a lifetime cap;
  never tombstoned: the cap holds for as long as the changelog lives).
* ``C``: the partition's clock, the largest wall-clock time any replica
  charged the partition at. A replica charges at ``max(now, clock)``, so a
  window one replica expired (and tombstoned) stays expired on a replica
  whose clock is slower.
* ``E``: where the closed past ends: every window that starts before
  ``closed_ms`` is closed, whatever ``window`` and ``grace`` say now. It
  only moves forward, so a longer window or a longer grace set later never
  reopens a window whose spending was tombstoned (records of a window that
  starts before it are ``late_record``).
* ``N``: cumulative record counts (``released`` and each suppression reason).
* ``D``: a deployment (its ``kafka.group_id``) charged this partition. A
  restore that meets another deployment's marker refuses the changelog: two
  deployments sharing one would each restore the other's spending
  (``replay.Replay.finish``).
* ``K``: every charge of the partition was made under a lifetime cap, so its
  ``L`` records hold every release. Written with the first charge under a
  cap, tombstoned by the first charge without one; a restore under a cap
  refuses a charged partition without it (``core.SubjectLedger.restored``).

* ``A``: the decision on a contribution (docs/proofs/ledger-aggregates.md, step 7):
  whether the subject's records stamped in the ledger window and in the window of the
  aggregate whose plan is ``partial_id`` (``AggregatePlan.partial_id``, ASCII) starting at
  ``aggregate_start_ms`` enter it (``admitted`` 1), its charge being in the ``W`` record
  written with it. Only admissions are written (a refusal is decided again, the same:
  the proof, "Refusals are not kept"); a 0 written by an earlier build is read as a
  refusal. ``kept_until_ms`` is that aggregate window's end plus its
  grace: the record is tombstoned once the ledger window is closed and the partition's
  clock is past it (``decisions``), whatever the config says by then. A privstream older
  than this record type refuses the changelog (``kind_of``): a rollback fails closed.

``subject`` is the subject's canonical bytes (``privstream.pipeline.subjects``).
A reader meeting another version byte refuses the changelog (``ChangelogError``)
rather than guess: a ledger it cannot read is a budget it cannot enforce.
"""

from __future__ import annotations

import json
import struct

from privstream.errors import ChangelogError

VERSION = 1
_V = bytes([VERSION])
WINDOW = _V + b"W"
LIFETIME = _V + b"L"
CLOCK_KEY = _V + b"C"
CLOSED_KEY = _V + b"E"
COUNTS_KEY = _V + b"N"
DEPLOYMENT = _V + b"D"
LIFETIME_KEPT = _V + b"K"
DECISION = _V + b"A"
#: the value of a ``D`` record (its key says it all; a non-empty value is not a tombstone)
MARK = b"\x01"
_KINDS = (b"W", b"L", b"C", b"E", b"N", b"D", b"K", b"A")
_WINDOW_HEAD = struct.Struct(">qq")
#: bytes before the subject in a window key
WINDOW_PREFIX_LEN = len(WINDOW) + _WINDOW_HEAD.size
_INT = struct.Struct(">q")
_DECISION_HEAD = struct.Struct(">qqqB")
#: bytes before the partial id in a decision key
DECISION_PREFIX_LEN = len(DECISION) + _DECISION_HEAD.size
_DECISION_VALUE = struct.Struct(">qB")
#: the value length of an ``A`` record
DECISION_VALUE_BYTES = _DECISION_VALUE.size


def window_prefix(start_ms: int, window_ms: int) -> bytes:
    """The key of a subject's spend in a window is this prefix followed by the subject."""
    return WINDOW + _WINDOW_HEAD.pack(start_ms, window_ms)


def window_of(key: bytes) -> tuple[int, int]:
    """(start_ms, window_ms) of a ``W`` key."""
    start, length = _WINDOW_HEAD.unpack_from(key, len(WINDOW))
    return int(start), int(length)


def decision_prefix(
    ledger_window: tuple[int, int], aggregate_start_ms: int, partial_id: bytes
) -> bytes:
    """The key of a subject's decision on a contribution is this prefix then the subject
    (``ledger_window``: the ledger window's start and length)."""
    if not 0 < len(partial_id) < 256:
        raise ChangelogError(
            f"ledger changelog: an aggregate plan id of {len(partial_id)} bytes; a decision "
            "names its plan in 1 to 255 bytes (AggregatePlan.partial_id is 32)"
        )
    start, length = ledger_window
    head = _DECISION_HEAD.pack(start, length, aggregate_start_ms, len(partial_id))
    return DECISION + head + partial_id


def decision_of(key: bytes) -> tuple[int, int, int, bytes, bytes]:
    """(ledger start, ledger window length, aggregate start, partial id, subject) of an
    ``A`` key."""
    start, length, aggregate, size = _DECISION_HEAD.unpack_from(key, len(DECISION))
    rest = key[DECISION_PREFIX_LEN:]
    return int(start), int(length), int(aggregate), rest[:size], rest[size:]


def encode_decision(kept_until_ms: int, admitted: bool) -> bytes:
    return _DECISION_VALUE.pack(kept_until_ms, int(admitted))


def decode_decision(value: bytes) -> tuple[int, bool]:
    """(kept until, admitted) of an ``A`` value; ChangelogError on a value of another length
    or a flag other than 0 or 1 (the aggregate stream folds rows without ``Replay``'s check)."""
    if len(value) != DECISION_VALUE_BYTES:
        raise ChangelogError(
            f"ledger changelog: an A record of {len(value)} bytes (version {VERSION} writes "
            f"{DECISION_VALUE_BYTES}); the changelog topic holds something else: give "
            "privacy.ledger.changelog_topic a topic of its own"
        )
    kept, flag = _DECISION_VALUE.unpack(value)
    if flag not in (0, 1):
        raise ChangelogError(
            f"ledger changelog: a decision record flagged {flag} (version {VERSION} writes 0 "
            "or 1); the changelog topic holds something else: give "
            "privacy.ledger.changelog_topic a topic of its own"
        )
    return int(kept), bool(flag)


def lifetime_key(subject: bytes) -> bytes:
    return LIFETIME + subject


def deployment_key(deployment: str) -> bytes:
    return DEPLOYMENT + deployment.encode()


def encode_int(value: int) -> bytes:
    return _INT.pack(value)


def decode_int(value: bytes) -> int:
    return int(_INT.unpack(value)[0])


def encode_counts(counts: dict[str, int]) -> bytes:
    return json.dumps(counts, sort_keys=True, separators=(",", ":")).encode()


def decode_counts(value: bytes) -> dict[str, int]:
    data = json.loads(value)
    if not isinstance(data, dict) or not all(isinstance(v, int) for v in data.values()):
        raise ChangelogError("ledger changelog: the counts record is not a JSON object of integers")
    return {str(k): int(v) for k, v in data.items()}


def kind_of(key: bytes) -> bytes:
    """The type byte (``W``, ``L``, ``C``, ``E``, ``N``, ``D``, ``K`` or ``A``);
    ChangelogError otherwise."""
    if len(key) < 2 or key[0] != VERSION:
        found = key[0] if key else None
        raise ChangelogError(
            f"ledger changelog: a record of version {found} (this privstream reads version "
            f"{VERSION}); run the privstream version that wrote it, or give "
            "privacy.ledger.changelog_topic a new topic (which restarts every subject's budget)"
        )
    kind = key[1:2]
    if kind not in _KINDS or (kind == b"W" and len(key) < WINDOW_PREFIX_LEN) or _short(kind, key):
        raise ChangelogError(f"ledger changelog: unknown record type {kind!r} in version {VERSION}")
    return kind


def _short(kind: bytes, key: bytes) -> bool:
    """An ``A`` key too short for its partial id (the subject may be empty only there)."""
    if kind != b"A":
        return False
    return (
        len(key) < DECISION_PREFIX_LEN
        or len(key) < DECISION_PREFIX_LEN + key[DECISION_PREFIX_LEN - 1]
    )
