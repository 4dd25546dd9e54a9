"""Read a YAML config, validate it, and report every problem on its own line.

Each line names the field path, e.g. ``fields[2] (salary).bounds: ...``, so
an operator can fix the file without reading a traceback.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from privstream.config.budget import (
    Guarantee,
    budget_problems,
    ledger_problems,
    noised_fields,
    resolve_budget,
)
from privstream.config.fields import FIELD_KINDS, FIELD_MODELS, LOCAL_REAL, RealField
from privstream.config.ledger import changelog_problems
from privstream.config.missing import MISSING_DEFAULTS
from privstream.config.models import AppConfig
from privstream.config.paths import name_from_path
from privstream.errors import ConfigError, MechanismError
from privstream.mechanisms.gaussian import analytic_gaussian_sigma, classical_gaussian_sigma
from privstream.mechanisms.laplace import laplace_scale
from privstream.mechanisms.validation import check_noise_scale


def load_config(path: str | Path) -> AppConfig:
    """Load and fully check a config file; raise ConfigError listing every problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"config {path}: cannot read it ({exc.strerror})"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        cause = f": {problem}" if problem else ""
        raise ConfigError([f"config {path}: not valid YAML{where}{cause}"]) from None
    return parse_config(data)


def parse_config(data: Any) -> AppConfig:
    """Validate already-parsed YAML/JSON data into an AppConfig."""
    if not isinstance(data, dict):
        raise ConfigError(
            ["config: the top level must be a mapping with privacy and fields (and kafka)"]
        )
    problems = _duplicate_names(data)
    try:
        config = AppConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([_format_error(err, data) for err in exc.errors()] + problems) from None
    problems += _release_problems(config) or _epsilon_sum_problems(config)
    problems = problems or budget_problems(config) or _grid_problems(config)
    problems = problems or ledger_problems(config) or _changelog_problems(config)
    if problems:
        raise ConfigError(problems)
    return config


def _epsilon_sum_problems(config: AppConfig) -> list[str]:
    """Basic composition sums the fields' epsilons: the sum must be a finite double."""
    explicit = [float(f.epsilon) for f in noised_fields(config) if f.epsilon != "auto"]
    try:
        math.fsum(explicit)
    except OverflowError:
        return [
            "fields: the fields' epsilons sum beyond the largest double (1.8e308), so the "
            "record's budget cannot even be stated; lower the fields' epsilons"
        ]
    return []


def _grid_problems(config: AppConfig) -> list[str]:
    """Real fields whose noise grid leaves the double range at their calibrated share.

    The share is the field's epsilon after ``auto`` and ``group_size``; the limits
    (noise scale in ``[2**-1012, 2**962)``, bounds within ``2**1002``) are derived in
    :mod:`privstream.mechanisms.validation`. Vector and functional fields run the same
    check when their mechanism is built.
    """
    shares = resolve_budget(config).fields
    problems: list[str] = []
    for position, spec in enumerate(config.fields):
        if not isinstance(spec, RealField) or spec.bounds[0] == spec.bounds[1]:
            continue
        share = shares[spec.name]
        lo, hi = spec.bounds
        try:
            scale = _real_scale(spec, share)
        except MechanismError:  # a calibration the mechanism refuses: build_plan says why
            continue
        if scale is None:
            continue
        try:
            check_noise_scale(scale, max(abs(lo), abs(hi)))
        except MechanismError as exc:
            problems.append(
                f"fields[{position}] ({spec.name}): bounds [{lo:g}, {hi:g}] (width "
                f"{hi - lo:.3g}) at epsilon {share.epsilon:.3g} (this field's share): {exc}"
            )
    return problems


def _real_scale(spec: RealField, share: Guarantee) -> float | None:
    """The continuous noise scale the field's mechanism picks its grid from (None: no grid).

    ``auto`` is checked as laplace (what it may pick); the local mechanisms
    report on a fixed grid of their own and check their reach when built.
    """
    width, eps, dlt = spec.bounds[1] - spec.bounds[0], share.epsilon, share.delta
    if spec.mechanism in LOCAL_REAL:
        return None
    if spec.mechanism in ("laplace", "auto"):
        return laplace_scale(width, eps, dlt, "thesis" if spec.calibration == "thesis" else "tight")
    if spec.calibration == "classical":
        return classical_gaussian_sigma(eps, dlt, width)
    return analytic_gaussian_sigma(eps, dlt, width)


def _release_problems(config: AppConfig) -> list[str]:
    if all(spec.kind == "drop" for spec in config.fields):
        return [
            "fields: no field would be released (none listed, or all are kind drop); "
            "list the fields to release"
        ]
    return []


def _changelog_problems(config: AppConfig) -> list[str]:
    kafka = config.kafka
    if kafka is None:  # file mode: no topics to clash with (a ledger is refused there)
        return []
    topics = {
        "input_topic": kafka.input_topic,
        "output_topic": kafka.output_topic,
        "dead_letter_topic": kafka.dead_letter_topic,
    }
    return changelog_problems(topics, config.privacy.ledger)


def _duplicate_names(data: dict[str, Any]) -> list[str]:
    fields = data.get("fields")
    if not isinstance(fields, list):
        return []
    names = [_name_of(f) for f in fields]
    counts = Counter(n for n in names if isinstance(n, str))
    return [
        f"fields[{position}] ({name}).name: field named {counts[name]} times; name each field once"
        for position, name in enumerate(names)
        if isinstance(name, str) and counts[name] > 1
    ]


def _name_of(field: object) -> object:
    """The name a raw field entry spells (its ``path`` joined), or None if it spells none."""
    try:
        entry = name_from_path(field)
    except ValueError:  # the field's own validation reports it
        return None
    return entry.get("name") if isinstance(entry, dict) else None


def record_budget(config: AppConfig) -> tuple[float, float]:
    """Event-level (epsilon, delta) of one whole record under basic composition."""
    event = resolve_budget(config).event
    return event.epsilon, event.delta


def config_sha256(config: AppConfig) -> str:
    """Hash of what determines the released data (privacy, fields, aggregates), not connections."""
    payload = config.model_dump(mode="json", include={"privacy", "fields", "aggregates"})
    if not payload["aggregates"]:  # a config without aggregates keeps its hash
        del payload["aggregates"]
    # the ledger settings enter only when set: a config without them keeps its hash
    for key, unset in (("subject", None), ("subject_public", False), ("ledger", None)):
        if payload["privacy"][key] == unset:
            del payload["privacy"][key]
    ledger = payload["privacy"].get("ledger")
    if ledger is not None and ledger["time"] is None:  # added later: unset keeps the hash
        del ledger["time"]
    # so do the missing-value options of a field (``on_missing``, ...)
    for field in payload["fields"]:
        for option, default in MISSING_DEFAULTS.items():
            if option in field and field[option] == default:
                del field[option]
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


#: keys people write for a field's ``kind`` (other tools' spelling)
_KIND_SYNONYMS = ("type", "kind_", "Kind", "field_kind", "fieldtype")


def _format_error(err: Any, data: dict[str, Any]) -> str:
    loc: tuple[Any, ...] = tuple(err["loc"])
    path = _format_path(loc, data)
    kind = err["type"]
    if kind == "extra_forbidden":
        hint = did_you_mean(str(loc[-1]), allowed_keys(loc[:-1], data))
        fix = hint or "; remove it or check its spelling"
        return f"{path}: unknown key{fix} (docs/configuration.md)"
    if kind == "missing":
        return f"{path}: required key is missing"
    if kind == "union_tag_not_found":  # a field entry without ``kind``
        entry = _field_entry(data, loc[-1]) if isinstance(loc[-1], int) else {}
        wrong = next((key for key in _KIND_SYNONYMS if key in entry), None)
        kinds = ", ".join(FIELD_KINDS)
        if wrong is not None:
            return f"{path}: {wrong!r} is not a field option; did you mean 'kind'? (one of {kinds})"
        return f"{path}.kind: required key is missing; use one of {kinds}"
    if kind == "union_tag_invalid":
        tag = str(err.get("ctx", {}).get("tag", ""))
        hint = did_you_mean(tag, FIELD_KINDS) or ";"
        return f"{path}.kind: unknown field kind {tag!r}{hint} (one of {', '.join(FIELD_KINDS)})"
    message = str(err["msg"]).removeprefix("Value error, ")
    if kind == "literal_error" and isinstance(err.get("input"), str):
        message += did_you_mean(err["input"], re.findall(r"'([^']*)'", str(err["msg"])))
    return f"{path}: {message}"


def did_you_mean(written: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'bounds'?"`` for the closest choice, or ``""`` when none is close."""
    close = difflib.get_close_matches(written, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def allowed_keys(loc: tuple[Any, ...], data: dict[str, Any]) -> list[str]:
    """The keys the model at ``loc`` (a location's parent, as pydantic gives it) accepts."""
    model: type[BaseModel] | None = AppConfig
    position = 0
    while position < len(loc):
        step = loc[position]
        if isinstance(step, int):  # an index into ``fields``: the entry's kind picks its model
            kind = _field_kind(data, step)
            model = _FIELD_MODEL_OF.get(str(kind))
            if position + 1 < len(loc) and loc[position + 1] == kind:
                position += 1  # pydantic's discriminator step
        elif model is not None:
            info = model.model_fields.get(str(step))
            model = None if info is None else _model_in(info.annotation)
        position += 1
    return [] if model is None else list(model.model_fields)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The one pydantic model an annotation holds (through Optional, Annotated, tuple)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    found = [m for arg in get_args(annotation) if (m := _model_in(arg)) is not None]
    return found[0] if len(found) == 1 else None


_FIELD_MODEL_OF: dict[str, type[BaseModel]] = dict(zip(FIELD_KINDS, FIELD_MODELS, strict=True))


def _format_path(loc: tuple[Any, ...], data: dict[str, Any]) -> str:
    """('fields', 2, 'real', 'bounds') -> 'fields[2] (salary).bounds'."""
    parts: list[str] = []
    i = 0
    while i < len(loc):
        item = loc[i]
        if isinstance(item, int):
            parts[-1] += f"[{item}]"
            if parts == [f"aggregates[{item}]"]:
                parts[-1] += _aggregate_name(data, item)
            if parts == ["fields[" + str(item) + "]"]:
                parts[-1] += _field_name(data, item)
                # pydantic inserts the discriminator value after the index: skip it
                if i + 1 < len(loc) and loc[i + 1] == _field_kind(data, item):
                    i += 1
        else:
            parts.append(str(item))
        i += 1
    return ".".join(parts) or "config"


def _field_entry(data: dict[str, Any], index: int) -> dict[str, Any]:
    fields = data.get("fields")
    if isinstance(fields, list) and index < len(fields):
        entry = fields[index]
        if isinstance(entry, dict):
            return entry
    return {}


def _field_name(data: dict[str, Any], index: int) -> str:
    name = _name_of(_field_entry(data, index))
    return f" ({name})" if isinstance(name, str) else ""


def _aggregate_name(data: dict[str, Any], index: int) -> str:
    aggregates = data.get("aggregates")
    if isinstance(aggregates, list) and index < len(aggregates):
        entry = aggregates[index]
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            return f" ({entry['name']})"
    return ""


def _field_kind(data: dict[str, Any], index: int) -> object:
    return _field_entry(data, index).get("kind")
