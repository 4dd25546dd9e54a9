"""Read a YAML config, validate it, and report every problem on its own line.

Each line names the field path, e.g. ``fields[2] (salary).bounds: ...``, so
an operator can fix the file without reading a traceback.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from privstream.config.budget import (
    Guarantee,
    budget_problems,
    ledger_problems,
    noised_fields,
    resolve_budget,
)
from privstream.config.fields import FIELD_KINDS, RealField
from privstream.config.models import AppConfig
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
        raise ConfigError(["config: the top level must be a mapping with kafka, privacy, fields"])
    problems = _duplicate_names(data)
    try:
        config = AppConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([_format_error(err, data) for err in exc.errors()] + problems) from None
    problems += _release_problems(config) or _epsilon_sum_problems(config)
    problems = problems or budget_problems(config) or _grid_problems(config)
    problems = problems or ledger_problems(config)
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

    ``auto`` is checked as laplace (what it may pick); piecewise and hybrid
    report on a fixed grid of their own and check their reach when built.
    """
    width, eps, dlt = spec.bounds[1] - spec.bounds[0], share.epsilon, share.delta
    if spec.mechanism in ("piecewise", "hybrid"):
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


def _duplicate_names(data: dict[str, Any]) -> list[str]:
    fields = data.get("fields")
    if not isinstance(fields, list):
        return []
    names = [f.get("name") if isinstance(f, dict) else None for f in fields]
    counts = Counter(n for n in names if isinstance(n, str))
    return [
        f"fields[{position}] ({name}).name: field named {counts[name]} times; name each field once"
        for position, name in enumerate(names)
        if isinstance(name, str) and counts[name] > 1
    ]


def record_budget(config: AppConfig) -> tuple[float, float]:
    """Event-level (epsilon, delta) of one whole record under basic composition."""
    event = resolve_budget(config).event
    return event.epsilon, event.delta


def config_sha256(config: AppConfig) -> str:
    """Hash of what determines the released data (privacy + fields), not of connection settings."""
    payload = config.model_dump(mode="json", include={"privacy", "fields"})
    # the ledger settings enter only when set: a config without them keeps its hash
    for key, unset in (("subject", None), ("subject_public", False), ("ledger", None)):
        if payload["privacy"][key] == unset:
            del payload["privacy"][key]
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _format_error(err: Any, data: dict[str, Any]) -> str:
    loc: tuple[Any, ...] = tuple(err["loc"])
    path = _format_path(loc, data)
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{path}: unknown key; remove it or check its spelling (docs/configuration.md)"
    if kind == "missing":
        return f"{path}: required key is missing"
    if kind == "union_tag_invalid":
        return f"{path}.kind: unknown field kind; use one of {', '.join(FIELD_KINDS)}"
    message = str(err["msg"]).removeprefix("Value error, ")
    return f"{path}: {message}"


def _format_path(loc: tuple[Any, ...], data: dict[str, Any]) -> str:
    """('fields', 2, 'real', 'bounds') -> 'fields[2] (salary).bounds'."""
    parts: list[str] = []
    i = 0
    while i < len(loc):
        item = loc[i]
        if isinstance(item, int):
            parts[-1] += f"[{item}]"
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
    name = _field_entry(data, index).get("name")
    return f" ({name})" if isinstance(name, str) else ""


def _field_kind(data: dict[str, Any], index: int) -> object:
    return _field_entry(data, index).get("kind")
