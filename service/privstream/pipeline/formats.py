"""The framed input formats (``kafka.format``): how each reads its writer schemas and values.

Each format's module is imported when a worker asks for it, so that its
optional packages (``privstream[protobuf]``, ``privstream[json_schema]``) are
needed only where it is used; one missing fails the start-up, never a record.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from privstream.errors import ConfigError
from privstream.pipeline.avro import Undecoded
from privstream.pipeline.decode import Names

#: a schema a writer schema references: (the name it uses for it, its registry text)
Reference = tuple[str, str]
#: (schema id, its text, its references in dependency order) -> the parsed writer schema
Parse = Callable[[int, str, Sequence[Reference]], Any]
ToJson = Callable[[Sequence[bytes | None], Mapping[int, Any]], list[bytes | Undecoded]]


@dataclass(frozen=True)
class Codec:
    """One format: the registry's ``schemaType`` for it, its reasons and its two steps."""

    name: str
    schema_type: str
    unknown_schema_id: str
    unsupported_schema: str
    #: the reason of a schema whose reference the registry does not have
    unknown_reference: str
    parse: Parse
    to_json: ToJson


#: format -> (module, the registry's schemaType, the pip extra that brings its packages)
_FORMATS = {
    "avro": ("privstream.pipeline.avro", "AVRO", None),
    "protobuf": ("privstream.pipeline.protobuf", "PROTOBUF", "protobuf"),
    "json_schema": ("privstream.pipeline.json_schema", "JSON", "json_schema"),
}


def codec(name: str, reads: Names) -> Codec:
    """The codec of ``kafka.format`` ``name`` (not ``json``) for a plan that reads the
    paths ``reads`` (JSON Schema validates those only).

    Raises ``ConfigError`` if the packages the format needs are not installed.
    """
    module_name, schema_type, extra = _FORMATS[name]
    try:
        module = importlib.import_module(module_name)
        if name == "protobuf":
            module.protoc_path()
    except ImportError as exc:
        raise ConfigError(
            [
                f"kafka.format {name} needs the package {exc.name!r}, which is not installed: "
                f"pip install 'privstream[{extra}]'"
            ]
        ) from None
    parse = module.parse_writer_schema
    if name == "json_schema":
        parse = functools.partial(parse, reads=tuple(reads))
    unknown, unsupported = module.UNKNOWN_SCHEMA_ID, module.UNSUPPORTED_SCHEMA
    missing = module.UNKNOWN_REFERENCE
    return Codec(name, schema_type, unknown, unsupported, missing, parse, module.to_json)
