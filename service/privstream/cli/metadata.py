"""Release metadata: what a sanitized file was released under, in a sidecar beside it.

``privstream sanitize --output out.jsonl`` writes ``out.jsonl.privstream.json``
(``sidecar_path``). A sidecar rather than a first header line keeps the output
plain JSON Lines that every tool reads; the topic's equivalent are the
``privstream-config-sha256``, ``privstream-epsilon`` and ``privstream-delta``
headers of every message. The sidecar holds:

* ``format`` and ``version`` (of this layout), the privstream version;
* ``written_by``: ``sanitize`` (beside its output) or ``explain`` (``explain
  --release-metadata``: what ``run`` releases under the config, for a topic
  dump without headers);
* ``config_sha256``: the hash of the config's ``privacy`` and ``fields``;
* ``record``: the event-level epsilon and delta of each record, and the
  group-level ones when ``privacy.group_size`` > 1;
* ``fields``: each released field's name, kind, mechanism, epsilon, delta,
  calibrated parameters (public fields: mechanism null) and, from version 2,
  ``release_id`` (hex: ``privstream.pipeline.plan.release_id``);
* ``records``: how many sanitized records the file holds (null from ``explain``).

``privstream estimate`` reads it back (``check_metadata``). Version 2 is
matched field by field by release id (``privstream.estimate.releases``): a
field whose release changed is refused by name with the reason, the others
stay usable whatever else changed in the config. Version 1 has no release
ids: any other config hash is refused whole.
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
from privstream.pipeline.plan import PlannedField

FORMAT = "privstream-release-metadata"
VERSION = 2
#: versions this privstream reads (1: no release ids, matched by the config hash)
READABLE = (1, 2)
SUFFIX = ".privstream.json"


class MetadataError(PrivstreamError):
    """The release metadata is missing, unreadable or names another release: exit 2."""


def sidecar_path(output: str) -> str:
    """Where the metadata of ``output`` lives."""
    return output + SUFFIX


def release_metadata(
    plan: RecordPlan, records: int | None, written_by: str = "sanitize"
) -> dict[str, Any]:
    """The metadata of ``records`` sanitized records released under ``plan`` (None: not
    known, the metadata of a topic written by ``explain --release-metadata``)."""
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
        "written_by": written_by,
        "config_sha256": plan.config_sha256,
        "record": record,
        "fields": [_field(f) for f in plan.fields],
        "records": records,
    }


def _field(planned: PlannedField) -> dict[str, Any]:
    mechanism = planned.handler.mechanism
    entry: dict[str, Any] = {"name": planned.name, "kind": planned.kind, "mechanism": None}
    if mechanism is not None:
        entry.update(
            mechanism=mechanism.name,
            epsilon=mechanism.epsilon,
            delta=mechanism.delta,
            params=mechanism.params(),
        )
    entry["release_id"] = planned.release_id.hex()
    return entry


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


def write_sidecar(
    path: str, plan: RecordPlan, records: int | None, written_by: str = "sanitize"
) -> None:
    """Write the metadata whole or not at all (a temporary file renamed over ``path``)."""
    text = json.dumps(release_metadata(plan, records, written_by), indent=2, allow_nan=False)
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
    if data.get("version") not in READABLE:
        raise MetadataError(
            f"{path}: release metadata version {data.get('version')!r}; this privstream "
            f"reads versions {', '.join(map(str, READABLE))}"
        )
    return data


def check_metadata(data: dict[str, Any], plan: RecordPlan, where: str) -> dict[str, str]:
    """The fields of ``plan`` the metadata's records released otherwise: ``name -> reason``.

    Version 2: field by field by release id, and each field's mechanism and
    parameters (the estimators must use the parameters the noise had). Version
    1: the config hash decides, then every field's parameters; any difference
    raises MetadataError.
    """
    # lazy: ``sanitize`` writes metadata and must not import the estimate package
    from privstream.estimate.releases import ABSENT

    if data.get("version") == 1:
        _check_whole(data, plan, where)
        return {}
    found = {f.get("name"): f for f in data.get("fields", []) if isinstance(f, dict)}
    refused = {}
    for planned in plan.fields:
        theirs = found.get(planned.name)
        if planned.handler.mechanism is None:
            # public here: nothing to debias, but a field noised there is no exact key (--by)
            if theirs is not None and theirs.get("mechanism") is not None:
                refused[planned.name] = (
                    f"released noised there ({theirs['mechanism']}), public here"
                )
            continue
        reason = ABSENT if theirs is None else _difference(theirs, _field(planned))
        if reason:
            refused[planned.name] = reason
    return refused


def _difference(theirs: dict[str, Any], ours: dict[str, Any]) -> str:
    """Why a field's release differs ("" when it does not): what changed, by name."""
    ours = json.loads(json.dumps(ours))
    changed = [
        f"{key} {theirs.get(key)!r} there, {ours[key]!r} here"
        for key in ("kind", "mechanism", "epsilon", "delta", "params")
        if theirs.get(key) != ours[key]
    ]
    if changed:
        return "; ".join(changed)
    from privstream.estimate.releases import CHANGED

    return "" if theirs.get("release_id") == ours["release_id"] else CHANGED


def _check_whole(data: dict[str, Any], plan: RecordPlan, where: str) -> None:
    """Version 1: the config hash and every field's mechanism and parameters must match."""
    found = data.get("config_sha256")
    if found != plan.config_sha256:
        raise MetadataError(
            f"{where}: made with config sha256 {found}, but --config has "
            f"{plan.config_sha256}: estimates would use the wrong mechanisms; pass the config "
            "the records were sanitized with"
        )
    expected = [
        {k: v for k, v in f.items() if k != "release_id"}
        for f in release_metadata(plan, 0)["fields"]
    ]
    if data.get("fields") != json.loads(json.dumps(expected)):
        names = [f.get("name") for f in data.get("fields", []) if isinstance(f, dict)]
        raise MetadataError(
            f"{where}: the same config hash, but the fields' mechanisms or parameters differ "
            f"from this privstream's calibration (fields {names}): made by privstream "
            f"{data.get('privstream_version')}, this is {__version__}"
        )
