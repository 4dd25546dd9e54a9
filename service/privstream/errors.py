"""One root exception and precise subclasses.

Messages name the field, the offending parameter and the fix. They never
contain a raw record value: errors end up in logs and dead-letter headers.
"""

from __future__ import annotations


class PrivstreamError(Exception):
    """Root of every error privstream raises on purpose."""


class MechanismError(PrivstreamError, ValueError):
    """A mechanism was given parameters that cannot give the stated guarantee."""


class ConfigError(PrivstreamError):
    """The configuration is invalid; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class SecretError(PrivstreamError):
    """A secret (noise key, broker password) is missing or unreadable."""


class BrokerError(PrivstreamError):
    """The broker refused the worker for good (authentication, TLS, authorization, fencing).

    Unlike a broker that is merely unreachable, retrying cannot help: the
    worker stops and says which setting to fix.
    """


class UndecodableBatchError(PrivstreamError):
    """A record batch the Kafka client cannot decode (corrupt bytes, a codec it lacks).

    Its partition stops right before it: nothing at or after ``offset`` is
    processed, released or restored until the batch decodes or an operator
    moves the partition past it (docs/operations.md).
    """

    def __init__(self, topic: str, partition: int, offset: int, cause: BaseException) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        name, text = type(cause).__name__, str(cause)
        # aiokafka's messages often start with their class name already
        self.cause = text if text.startswith(name) else f"{name}: {text}"
        super().__init__(
            f"{topic}/{partition}: the record batch at offset {offset} cannot be decoded "
            f"({self.cause}); nothing from offset {offset} on is processed until it can. "
            "A missing codec needs privstream's dependencies reinstalled (cramjam); a corrupt "
            "batch needs the recovery in docs/operations.md (an undecodable batch)"
        )


class MisuseError(PrivstreamError, ValueError):
    """An internal API was called outside its contract (mismatched lengths, a bad count).

    A programming error, never a record or config problem.
    """


class NoiseError(MisuseError):
    """A noise source was used outside its contract (more rows than it is bound to, a bad key).

    The caller asked a keyed or memo source for words it cannot give without
    reusing or inventing noise.
    """


class Rejected(PrivstreamError):
    """This record cannot be sanitized; it goes to the dead-letter output.

    ``reason`` is a low-cardinality code (a metric label), ``detail`` names
    the field but never quotes the raw value.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class AuditError(PrivstreamError):
    """The audit cannot run (a field it does not know how to audit, a rejected audit record)."""


class RegistryError(PrivstreamError):
    """A field kind or mechanism is not registered, or its registration lacks a part.

    Raised when the registry is loaded or a plan is built (start-up), never
    while records flow: a kind the code cannot release, estimate or audit
    must not be half-supported.
    """


class LedgerError(PrivstreamError):
    """The subject ledger's changelog cannot be used (unknown version, another window length).

    Raised on restore, before a partition is processed: charging from a
    ledger that does not hold the partition's true spending would break the
    per-subject guarantee.
    """


class ChangelogError(LedgerError):
    """The changelog holds a ledger this deployment must not take as its own (another
    version, window length or deployment): a human fixes the config or the topic (exit 2).
    """


class TopicError(PrivstreamError):
    """A topic the worker names is missing or misconfigured (exit 2, before any record).

    A human fixes it (creates the topic, alters its config); the worker never
    creates one by accident nor works around one that would weaken a guarantee.
    """


class ClockAheadError(PrivstreamError):
    """This replica's clock is ahead of the broker's by more than the ledger allows.

    The worker charges nothing while it is (the batch's transaction is
    aborted) and retries: a fast clock committed to the changelog would close
    every open window on every replica (docs/ledger.md, Clock sanity).
    """


class SchemaRegistryUnavailableError(PrivstreamError):
    """The schema registry did not answer a schema request (down, slow, refusing us).

    Never a reason to dead-letter: the batch waiting for the schema is dropped
    unreleased, the worker is not ready, and the session is retried with backoff
    from the committed offsets.
    """


class OutputSchemaError(PrivstreamError):
    """The Avro output schema cannot be derived from the config, or the registry refuses it.

    Raised at start-up, before any record is read: a field Avro cannot name or type, or a
    config change whose derived schema is not BACKWARD compatible with the latest version
    registered under ``<output_topic>-value``. The worker exits non-zero.
    """
