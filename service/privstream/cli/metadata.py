"""Release metadata: what a sanitized file was released under, in a sidecar beside it.

``privstream sanitize --output out.jsonl`` writes ``out.jsonl.privstream.json``
(``sidecar_path``). A sidecar rather than a first header line keeps the output
plain JSON Lines that every tool reads; the topic's equivalent are the
``privstream-config-sha256``, ``privstream-epsilon`` and ``privstream-delta``
headers of every message. The sidecar holds:

* ``format`` and ``version`` (of this layout), the privstream version;
* ``config_sha256``: the hash of the config's ``privacy`` and ``fields``;
* ``record``: the event-level epsilon and delta of each record, and the
  group-level ones when ``privacy.group_size`` > 1;
* ``fields``: each released field's name, kind, mechanism, epsilon, delta and
  calibrated parameters (public fields: mechanism null);
* ``records``: how many sanitized records the file holds.

``privstream estimate`` reads it back (``check_metadata``) and refuses an
input made under another config.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from privstream import __version__
from privstream.cli.release_files import OUTPUT_MODE, AtomicFile
from privstream.errors import PrivstreamError
from privstream.pipeline import RecordPlan

FORMAT = "privstream-release-metadata"
VERSION = 1
SUFFIX = ".privstream.json"


class MetadataError(PrivstreamError):
    """The release metadata is missing, unreadable or names another release: exit 2."""


def sidecar_path(output: str) -> str:
    """Where the metadata of ``output`` lives."""
    return output + SUFFIX


def release_metadata(plan: RecordPlan, records: int) -> dict[str, Any]:
    """The metadata of ``records`` sanitized records released under ``plan``."""
    budget = plan.budget
    record: dict[str, Any] = {
        "epsilon": plan.epsilon,
        "delta": plan.delta,
        "group_size": budget.group_size,
    }
    if budget.group_size > 1:
        record.update(group_epsilon=budget.group.epsilon, group_delta=budget.group.delta)
    return {
        "format": FORMAT,
        "version": VERSION,
        "privstream_version": __version__,
        "config_sha256": plan.config_sha256,
        "record": record,
        "fields": [_field(f.name, f.kind, f.handler.mechanism) for f in plan.fields],
        "records": records,
    }


def _field(name: str, kind: str, mechanism: Any) -> dict[str, Any]:
    if mechanism is None:
        return {"name": name, "kind": kind, "mechanism": None}
    return {
        "name": name,
        "kind": kind,
        "mechanism": mechanism.name,
        "epsilon": mechanism.epsilon,
        "delta": mechanism.delta,
        "params": mechanism.params(),
    }


def metadata_target(
    metadata: str | None, input_path: str | None, output: str | None, dead_letter: str
) -> str | None:
    """Where ``sanitize`` writes the metadata (None: output on stdout, no ``--metadata``).

    Refuses a path that is the input, the output or the dead-letter file. An
    earlier run's metadata at that path stays until this run's output is
    renamed into place (``run_sanitize``): a failing run leaves both as they were.
    """
    path = metadata or (sidecar_path(output) if output else None)
    if path is None:
        return None
    for role, other in (
        ("--input", input_path),
        ("--output", output),
        ("--dead-letter", dead_letter),
    ):
        if other is not None and os.path.realpath(path) == os.path.realpath(other):
            raise MetadataError(f"--metadata {path} is the {role} file: name another file")
    return path


def write_sidecar(path: str, plan: RecordPlan, records: int) -> None:
    """Write the metadata whole or not at all (a temporary file renamed over ``path``)."""
    text = json.dumps(release_metadata(plan, records), indent=2, allow_nan=False)
    sidecar = AtomicFile(path, OUTPUT_MODE)
    try:
        sidecar.write(text.encode() + b"\n")
        sidecar.commit()
    finally:
        sidecar.discard()  # a no-op once committed


def read_sidecar(path: str) -> dict[str, Any]:
    """The metadata at ``path``; MetadataError says what is wrong with it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MetadataError(f"no release metadata at {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise MetadataError(f"release metadata {path} is unreadable: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise MetadataError(f"{path} is not privstream release metadata (no format {FORMAT!r})")
    if data.get("version") != VERSION:
        raise MetadataError(
            f"{path}: release metadata version {data.get('version')!r}; this privstream "
            f"reads version {VERSION}"
        )
    return data


def check_metadata(data: dict[str, Any], plan: RecordPlan, where: str) -> None:
    """Refuse metadata made under another config than ``plan``'s.

    The config hash decides; the fields' mechanisms and parameters are
    compared too, since a privstream version may calibrate the same config
    differently (the estimators must use the parameters the noise had).
    """
    found = data.get("config_sha256")
    if found != plan.config_sha256:
        raise MetadataError(
            f"{where}: made with config sha256 {found}, but --config has "
            f"{plan.config_sha256}: estimates would use the wrong mechanisms; pass the config "
            "the records were sanitized with"
        )
    expected = release_metadata(plan, 0)["fields"]
    if data.get("fields") != json.loads(json.dumps(expected)):
        names = [f.get("name") for f in data.get("fields", []) if isinstance(f, dict)]
        raise MetadataError(
            f"{where}: the same config hash, but the fields' mechanisms or parameters differ "
            f"from this privstream's calibration (fields {names}): made by privstream "
            f"{data.get('privstream_version')}, this is {__version__}"
        )
