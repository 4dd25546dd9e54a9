"""Every aiokafka internal privstream uses, in one place, checked against the installed version.

aiokafka's public API (``AIOKafkaConsumer``, ``AIOKafkaProducer``, the admin
client, ``errors``, ``TopicPartition``) is imported where it is used. What
is not public (the fetcher's record sets, the pure-Python batch reader, the
producer's sender and batch builders, protocol structs, the clients' module
attributes patched to refuse topic auto-creation) is imported here only, so
that an auditor or an upgrade reads one list. ``pyproject.toml`` pins aiokafka
below the next minor version; this module also refuses to load under a
version it was not checked against (``SUPPORTED``), naming the fix, rather
than letting a patched internal silently stop doing its job.
"""

from __future__ import annotations

import aiokafka
import aiokafka.admin.client as admin_client_module
import aiokafka.client as client_module
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.client import CoordinationType
from aiokafka.conn import create_conn
from aiokafka.consumer import fetcher
from aiokafka.helpers import create_ssl_context
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.producer.sender import (
    BACKOFF_OVERRIDE,
    AddPartitionsToTxnHandler,
    Sender,
    TxnOffsetCommitHandler,
)
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)
from aiokafka.record.default_records import DefaultRecordBatchBuilder, _DefaultRecordBatchPy
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c, decode_varint
from aiokafka.structs import ConsumerRecord, RecordMetadata

from privstream.errors import MisuseError

#: the aiokafka minor versions whose internals this module was checked against
SUPPORTED = ("0.14",)


def check_version(version: str) -> None:
    """Refuse an aiokafka whose internals were never checked (MisuseError naming the fix)."""
    if not any(version == minor or version.startswith(minor + ".") for minor in SUPPORTED):
        raise MisuseError(
            f"aiokafka {version} is installed; privstream reaches into aiokafka's internals "
            f"and was checked against {', '.join(SUPPORTED)} only: install "
            "'aiokafka>=0.14,<0.15' (pyproject.toml pins it)"
        )


check_version(aiokafka.__version__)

__all__ = [
    "BACKOFF_OVERRIDE",
    "AddPartitionsToTxnHandler",
    "BatchBuilder",
    "Boolean",
    "CompactArray",
    "CompactString",
    "ConfigResource",
    "ConfigResourceType",
    "ConsumerRecord",
    "CoordinationType",
    "DefaultRecordBatchBuilder",
    "Int16",
    "Int32",
    "Int64",
    "MemoryRecords",
    "MetadataRequest",
    "RecordMetadata",
    "Request",
    "RequestStruct",
    "Response",
    "Schema",
    "Sender",
    "TaggedFields",
    "TxnOffsetCommitHandler",
    "_DefaultRecordBatchPy",
    "admin_client_module",
    "calc_crc32c",
    "client_module",
    "create_conn",
    "create_ssl_context",
    "decode_varint",
    "fetcher",
]
