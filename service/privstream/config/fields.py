"""Field specifications: one model per field kind, discriminated by ``kind``.

A field names its mechanism and its share of the record budget
(``epsilon: auto`` splits what the explicit fields leave, evenly).
Mechanism-specific parameters are validated by the same checks the
mechanisms use (``privstream.mechanisms.validation``).
"""

# no ``from __future__ import annotations``: pydantic would compile every field's
# annotation from its text at start-up (about 2.5 ms of every command, docs/benchmarks.md)
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from privstream.config import timestamps
from privstream.config.missing import OnMissing, missing_problem
from privstream.config.paths import name_from_path, split_path
from privstream.errors import MechanismError
from privstream.mechanisms import validation

T = TypeVar("T")
R = TypeVar("R")


def _pydantic(check: Callable[[T], R]) -> AfterValidator:
    """Reuse a mechanisms.validation check; its message becomes the config error."""

    def run(value: T) -> R:
        try:
            return check(value)
        except MechanismError as exc:
            raise ValueError(str(exc)) from None

    return AfterValidator(run)


Epsilon = Annotated[float, _pydantic(validation.check_epsilon)]
Delta = Annotated[float, _pydantic(validation.check_delta)]
Bounds = Annotated[tuple[float, float], _pydantic(validation.check_bounds)]
IntegerBounds = Annotated[tuple[float, float], _pydantic(validation.check_integer_bounds)]
DomainValue = StrictStr | StrictInt
#: what ``impute`` takes: a value of some kind's domain (checked against the field's own)
ImputeScalar = StrictBool | StrictInt | StrictFloat | StrictStr
ImputeValue = ImputeScalar | list[ImputeScalar]
Domain = Annotated[tuple[DomainValue, ...], _pydantic(validation.check_domain)]
Universe = Annotated[tuple[StrictStr, ...], _pydantic(validation.check_domain)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: an L2 radius (``l2_bound``, ``rkhs_radius``): > 0 and within ``2**1002`` (validation docstring)
Radius = Annotated[PositiveFloat, _pydantic(lambda r: validation.check_magnitude(r, "radius"))]
#: the name of another field of the record (``memoize_by``)
MemoField = Annotated[StrictStr, Field(min_length=1)]
#: kinds whose values can be a memo identity: never a noised kind, whose raw value would
#: then steer the noise and be given away by it (docs/protection.md, "Repeated reports")
MEMO_KINDS = ("drop", "public")
#: the pure epsilon-DP local mechanisms for means (no calibration choice, no delta used);
#: an ``integer`` field may take them too
LOCAL_REAL_MECHANISMS = ("piecewise", "hybrid", "duchi", "pm_sub", "three_outputs")
#: truncation draws one word per item after the mechanism's one per universe item, and a
#: record's stream holds 2**17 words per field
MAX_TRUNCATED_UNIVERSE = 2**16
#: ``memo_identity: message_key``: the Kafka message key names the device
MemoIdentity = Literal["message_key"]


def _epsilon_share(value: object) -> float | Literal["auto"]:
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("epsilon must be a number > 0 or auto")
    try:
        return validation.check_epsilon(float(value))
    except (ValueError, MechanismError) as exc:
        raise ValueError(
            str(exc) if isinstance(exc, MechanismError) else "epsilon must be a number > 0 or auto"
        ) from None


EpsilonShare = Annotated[float | Literal["auto"], PlainValidator(_epsilon_share)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _NamedField(Strict):
    #: a path into the record: keys joined by dots (``device.os``), ``\.`` for a dot inside
    #: a key; or give ``path: [device, os]`` instead (``privstream.config.paths``)
    name: str = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _path_as_name(cls, data: Any) -> Any:
        return name_from_path(data)

    @field_validator("name")
    @classmethod
    def _name_is_a_path(cls, name: str) -> str:
        split_path(name)  # a ValueError naming the name and the fix
        return name


class DropField(_NamedField):
    """Never released: removed from the output."""

    kind: Literal["drop"]


class PublicField(_NamedField):
    """Released as is. Only for values that are not personal (a sequence number; a time is
    better truncated: ``kind: timestamp``)."""

    kind: Literal["public"]
    #: copy objects and arrays too (at most 100 levels deep); by default only strings,
    #: numbers, booleans and null pass, so personal data nested under a public field by an
    #: upstream change never leaks
    allow_nested: bool = False


def _on_missing_text(value: object) -> object:
    # ``on_missing: null`` in YAML is the null value itself, not the string
    return "null" if value is None else value


M = TypeVar("M", bound=BaseModel)


def _checked_missing(spec: M) -> M:
    problem = missing_problem(spec)
    if problem is not None:
        raise ValueError(problem)
    return spec


class _NoisedField(_NamedField):
    epsilon: EpsilonShare
    delta: Delta = 0.0
    #: an absent or null value: dead-letter the record, impute ``impute`` before the
    #: mechanism, or release null (presence public) (``privstream.config.missing``)
    on_missing: OnMissing = "dead_letter"
    #: the in-domain value ``on_missing: impute`` puts in place of an absent or null one
    impute: ImputeValue | None = None
    #: ``on_missing: null`` with ``privacy.subject``: the field's presence is not personal
    presence_public: bool = False
    #: ``on_missing: impute``: also release ``<name>_present``, whether the value was
    #: present, by randomized response at this epsilon (added to the record's)
    presence_epsilon: Epsilon | None = None

    @field_validator("on_missing", mode="before")
    @classmethod
    def _yaml_null(cls, value: object) -> object:
        return _on_missing_text(value)

    @model_validator(mode="after")
    def _missing_options(self) -> "_NoisedField":
        return _checked_missing(self)


#: the pure epsilon-DP local mechanisms of a real field (no calibration option, delta 0)
LOCAL_REAL = (*LOCAL_REAL_MECHANISMS, "square_wave")


def _distribution_mechanism(data: dict[str, Any]) -> dict[str, Any]:
    """``target: distribution``: ``auto`` (or nothing) becomes square_wave; others are refused."""
    mechanism = data.get("mechanism", "auto")
    if mechanism == "auto":
        return {**data, "mechanism": "square_wave"}
    if mechanism != "square_wave":
        raise ValueError(
            f"target: distribution is served by square_wave only, and this field declares "
            f"mechanism {mechanism}; remove mechanism (or set it to square_wave)"
        )
    return data


class RealField(_NoisedField):
    """A bounded real: clamped into ``bounds``, then noised on a fixed grid.

    ``auto`` (the default) picks the mechanism of least regret over every data
    spread at the field's resolved (epsilon, delta), or of least variance at a
    declared ``spread`` (``privstream.kinds.auto_real``); piecewise and hybrid
    (Wang et al. 2019), duchi (Duchi et al. 2018), pm_sub and three_outputs (Zhao et al.
    2020) are pure epsilon-DP local mechanisms for means. ``target: distribution``
    asks for a histogram instead and takes square_wave (Li et al. 2020), whose
    reports stay near the value.
    """

    kind: Literal["real"]
    bounds: Bounds
    mechanism: Literal[
        "auto",
        "laplace",
        "gaussian",
        "piecewise",
        "hybrid",
        "duchi",
        "pm_sub",
        "three_outputs",
        "square_wave",
    ] = "auto"
    #: what the analyst wants of the field: its ``mean`` (default) or its ``distribution``
    #: (a histogram: ``auto`` then means square_wave, the only mechanism offered for it)
    target: Literal["mean", "distribution"] = "mean"
    #: what is known of the data, for ``auto`` only: ``wide`` (spread over the bounds, taken
    #: as a mean t^2 of 1/3) or ``near_bounds`` (at or near them, t^2 = 1); ``auto`` then
    #: picks the least variance there instead of the least regret over every spread
    spread: Literal["wide", "near_bounds"] | None = None
    #: laplace (and auto, if it picks laplace): tight (default) | thesis;
    #: gaussian: analytic (default) | classical; the local mechanisms: none (tight, the default)
    calibration: Literal["tight", "thesis", "analytic", "classical"]

    @model_validator(mode="before")
    @classmethod
    def _default_calibration(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("target") == "distribution":
            data = _distribution_mechanism(data)
        if isinstance(data, dict) and "calibration" not in data:
            default = "analytic" if data.get("mechanism") == "gaussian" else "tight"
            return {**data, "calibration": default}
        return data

    @model_validator(mode="after")
    def _calibration_fits_mechanism(self) -> "RealField":
        if self.spread is not None and self.mechanism != "auto":
            raise ValueError(
                f"spread {self.spread!r} guides mechanism: auto only, and this field declares "
                f"{self.mechanism}; remove spread or mechanism"
            )
        allowed = {
            "auto": ("tight", "thesis"),
            "laplace": ("tight", "thesis"),
            "gaussian": ("analytic", "classical"),
        }
        if self.mechanism == "square_wave" and self.target != "distribution":
            raise ValueError(
                "square_wave releases reports for a histogram, not a mean; "
                "set target: distribution (or pick a mean mechanism)"
            )
        if self.mechanism in LOCAL_REAL:
            if self.calibration != "tight":
                raise ValueError(
                    f"calibration {self.calibration!r} does not apply to {self.mechanism}, "
                    "which has none; remove calibration"
                )
            if self.delta != 0.0:
                raise ValueError(f"{self.mechanism} is pure epsilon-DP; set delta to 0")
            return self
        options = allowed[self.mechanism]
        if self.calibration not in options:
            raise ValueError(
                f"calibration {self.calibration!r} does not apply to {self.mechanism}; "
                f"use one of {', '.join(options)}"
            )
        if self.mechanism == "gaussian" and self.delta == 0.0:
            raise ValueError("the gaussian mechanism needs delta > 0; set delta or use laplace")
        return self


class IntegerField(_NoisedField):
    """A bounded integer counter: clamped, then discrete Laplace noise (the default).

    The real-field local mechanisms (``LOCAL_REAL_MECHANISMS``) treat the integer
    as a real in ``bounds`` and release reals; ``auto`` picks between discrete
    Laplace and them by the least regret over every data spread
    (``privstream.kinds.auto_real``). Integers are never memoized.
    """

    kind: Literal["integer"]
    bounds: IntegerBounds
    mechanism: Literal[
        "discrete_laplace", "auto", "piecewise", "hybrid", "duchi", "pm_sub", "three_outputs"
    ] = "discrete_laplace"

    @model_validator(mode="after")
    def _local_mechanisms_are_pure(self) -> "IntegerField":
        if self.mechanism in LOCAL_REAL_MECHANISMS and self.delta != 0.0:
            raise ValueError(f"{self.mechanism} is pure epsilon-DP; set delta to 0")
        return self


class CategoricalField(_NoisedField):
    """A value from a finite domain (randomized response, exponential, unary encoding, subset
    selection) or an open one (hashing).

    ``exponential`` uses the domain's declared order (``privstream.mechanisms.exponential``);
    ``unary_encoding`` releases the array of domain values whose noisy bit is 1
    (``privstream.mechanisms.unary_categorical``), ``subset_selection`` the array of the ``d``
    chosen values (``privstream.mechanisms.subset_selection``). ``auto`` (the default) picks
    among randomized response, local hashing, unary encoding and subset selection by their
    estimator variance at the field's resolved epsilon (``privstream.mechanisms.selection``);
    without a domain it is local hashing.
    """

    kind: Literal["categorical"]
    domain: Domain | None = None
    mechanism: Literal[
        "auto",
        "randomized_response",
        "local_hashing",
        "exponential",
        "unary_encoding",
        "subset_selection",
    ] = "auto"
    #: map a value outside the domain to this domain value instead of dead-lettering
    unknown_as: DomainValue | None = None
    #: permanent randomized response keyed by the Kafka message key (trusted: set by the
    #: collector from an authenticated session), see ``_Memoizable``
    memo_identity: MemoIdentity | None = None
    #: permanent randomized response keyed by a record field: forgeable by any writer, so
    #: only with ``memo_identity_trusted: true``; checked against the other fields by AppConfig
    memoize_by: MemoField | None = None
    memo_identity_trusted: bool = False

    @model_validator(mode="after")
    def _domain_fits_mechanism(self) -> "CategoricalField":
        if self.mechanism not in ("local_hashing", "auto") and self.domain is None:
            raise ValueError(f"{self.mechanism} needs a domain; list it or use local_hashing")
        if self.mechanism == "auto" and self.domain is None and self.delta != 0.0:
            raise ValueError(
                "auto without a domain is local_hashing, which is pure epsilon-DP; "
                "set delta to 0 or list the domain"
            )
        if self.mechanism in ("exponential", "unary_encoding", "subset_selection") and self.delta:
            raise ValueError(f"{self.mechanism} is pure epsilon-DP; set delta to 0")
        if self.mechanism == "local_hashing" and (self.domain is not None or self.unknown_as):
            raise ValueError("local_hashing takes any string; remove domain and unknown_as")
        if self.mechanism == "local_hashing" and self.delta != 0.0:
            raise ValueError("local_hashing is pure epsilon-DP; set delta to 0")
        if self.unknown_as is not None and self.unknown_as not in (self.domain or ()):
            raise ValueError(
                f"unknown_as {self.unknown_as!r} is not in the domain; add it to the domain"
            )
        return self


class BooleanField(_NoisedField):
    """A JSON true/false: randomized response with m = 1."""

    kind: Literal["boolean"]
    mechanism: Literal["randomized_response"] = "randomized_response"
    #: permanent randomized response, as for categorical fields
    memo_identity: MemoIdentity | None = None
    memoize_by: MemoField | None = None
    memo_identity_trusted: bool = False


class SetField(_NoisedField):
    """A set of items from a finite universe (a list of strings), unary encoding."""

    kind: Literal["set"]
    universe: Universe
    max_items: int = Field(ge=1)
    mechanism: Literal["unary_encoding"] = "unary_encoding"
    variant: Literal["optimized", "symmetric"] = "optimized"
    #: items outside the universe: dead-letter the record, or drop those items and release
    on_unknown: Literal["dead_letter", "drop"] = "dead_letter"
    #: more than max_items distinct items: dead-letter, or release a uniformly random
    #: subset of max_items of them (drawn from the record's noise stream)
    on_too_many: Literal["dead_letter", "truncate"] = "dead_letter"

    @model_validator(mode="after")
    def _pure(self) -> "SetField":
        if self.delta != 0.0:
            raise ValueError("unary_encoding is pure epsilon-DP; set delta to 0")
        if self.on_too_many == "truncate" and len(self.universe) > MAX_TRUNCATED_UNIVERSE:
            raise ValueError(
                f"on_too_many: truncate supports a universe of at most "
                f"{MAX_TRUNCATED_UNIVERSE} items (it has {len(self.universe)}); "
                "use on_too_many: dead_letter or a smaller universe"
            )
        return self


class VectorField(_NoisedField):
    """A fixed-length numeric vector, clipped to an L2 ball, Gaussian noise."""

    kind: Literal["vector"]
    dimension: int = Field(ge=1, le=65_536)
    l2_bound: Radius
    mechanism: Literal["gaussian"] = "gaussian"
    calibration: Literal["analytic", "classical"] = "analytic"


class FunctionalField(_NoisedField):
    """A function sampled on a fixed grid: RKHS clipping and Gaussian-process noise."""

    kind: Literal["functional"]
    grid: tuple[float, ...] = Field(min_length=1, max_length=4096)
    bandwidth: PositiveFloat
    rkhs_radius: Radius
    mechanism: Literal["gaussian_process"] = "gaussian_process"
    #: thesis: sqrt(2 ln(2/delta)) 2R/eps, eps <= 1; analytic: any eps
    calibration: Literal["thesis", "analytic"] = "thesis"


def _granularity(text: str) -> str:
    timestamps.granularity_us(text)  # a ValueError naming the accepted forms
    return text


Granularity = Annotated[StrictStr, AfterValidator(_granularity)]


class TimestampField(_NamedField):
    """A point in time (ISO 8601 text or an epoch number), truncated to ``granularity``.

    Every record's time is cut to the start of its unit (the same granularity
    for all). Without ``epsilon`` the truncated time is released as is: a
    public transform, not private. With ``epsilon`` the unit index, clamped
    into ``bounds``, gets discrete Laplace noise in whole units
    (``privstream.kinds.timestamp``).
    """

    kind: Literal["timestamp"]
    #: ``<n><s|m|h|d>``: 1m, 15m, 1h, 1d; units are aligned to 1970-01-01T00:00:00Z
    granularity: Granularity
    #: what an epoch number counts: seconds or milliseconds since 1970-01-01T00:00:00Z
    epoch_unit: timestamps.EpochUnit = "s"
    #: read ISO text without an offset as UTC; otherwise such a record is dead-lettered
    assume_utc: bool = False
    #: released as ISO 8601 UTC text (``2026-11-28T04:00:00Z``) or epoch seconds/milliseconds
    output: Literal["iso", "epoch_s", "epoch_ms"] = "iso"
    #: [earliest, latest] as ISO 8601 text: times outside are clamped; required with epsilon
    bounds: tuple[StrictStr, StrictStr] | None = None
    #: with it, noise in whole units; without it, no noise and nothing private
    epsilon: EpsilonShare | None = None
    delta: Delta = 0.0
    #: set to discrete_laplace when epsilon is given; none without
    mechanism: Literal["discrete_laplace"] | None = None
    #: as for the noised kinds (``privstream.config.missing``); without epsilon, impute
    #: (and so presence_epsilon) is refused: the imputed time would be released in the clear
    on_missing: OnMissing = "dead_letter"
    impute: ImputeValue | None = None
    presence_public: bool = False
    presence_epsilon: Epsilon | None = None

    @field_validator("on_missing", mode="before")
    @classmethod
    def _yaml_null(cls, value: object) -> object:
        return _on_missing_text(value)

    @model_validator(mode="before")
    @classmethod
    def _default_mechanism(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("epsilon") is not None and "mechanism" not in data:
            return {**data, "mechanism": "discrete_laplace"}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "TimestampField":
        if self.epsilon is None:
            if self.mechanism is not None or self.delta != 0.0:
                raise ValueError(
                    "mechanism and delta apply to a noised timestamp only; give epsilon "
                    "(and bounds), or remove them to release the truncated time as is"
                )
        elif self.bounds is None:
            raise ValueError(
                "a noised timestamp needs bounds: the earliest and latest time as ISO text, "
                'e.g. bounds: ["2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"]'
            )
        lower, upper = self.unit_bounds
        if lower > upper:
            raise ValueError(
                f"bounds {list(self.bounds or ())} are reversed; write the earliest first"
            )
        return _checked_missing(self)

    @property
    def unit_us(self) -> int:
        """The granularity in microseconds."""
        return timestamps.granularity_us(self.granularity)

    @property
    def unit_bounds(self) -> tuple[int, int]:
        """(first, last) unit index released: the units holding the bounds, within
        ``iso_units`` (every unit whose start ISO text can write); no bounds: all of them."""
        first, last = timestamps.iso_units(self.unit_us)
        if self.bounds is None:
            return first, last
        lower, upper = (self._bound(i, text) // self.unit_us for i, text in enumerate(self.bounds))
        return max(lower, first), min(upper, last)

    def _bound(self, position: int, text: str) -> int:
        try:
            return timestamps.parse_iso(text, assume_utc=self.assume_utc)
        except timestamps.BadTimestamp:
            raise ValueError(
                f"bounds[{position}] {text!r} is no ISO 8601 time with a UTC offset; write "
                "e.g. 2026-01-01T00:00:00Z (or set assume_utc: true for times without one)"
            ) from None


NoisedField = (
    RealField
    | IntegerField
    | CategoricalField
    | BooleanField
    | SetField
    | VectorField
    | FunctionalField
)
FieldConfig = Annotated[
    DropField | PublicField | NoisedField | TimestampField, Field(discriminator="kind")
]
#: every field model, in the order of the union (a new kind is added to the union only)
FIELD_MODELS: tuple[type[_NamedField], ...] = get_args(get_args(FieldConfig)[0])
FIELD_KINDS: tuple[str, ...] = tuple(
    get_args(model.model_fields["kind"].annotation)[0] for model in FIELD_MODELS
)


def mechanisms_of(model: type[_NamedField]) -> tuple[str | None, ...]:
    """The ``mechanism`` values a field model accepts (none for drop and public).

    None among them: the kind is also released without noise (a timestamp without epsilon).
    """
    field = model.model_fields.get("mechanism")
    if field is None:
        return ()
    values: list[str | None] = []
    for arg in get_args(field.annotation):
        if arg is type(None):
            values.append(None)
        elif get_origin(arg) is Literal:
            values.extend(get_args(arg))
        else:
            values.append(arg)
    return tuple(values)


#: why a record field is no memo identity unless the operator vouches for its writers
FORGEABLE = (
    "any writer of the raw topic can put a victim's id in that field and send candidate "
    "values: each probe's answer is the victim's memoized answer for that value, which "
    "gives the value away whatever the epsilon"
)


def _memo_problem(spec: _NamedField, kinds: dict[str, str]) -> tuple[str, str] | None:
    """(option, message) of the first memo problem of one field, or None."""
    memo = getattr(spec, "memoize_by", None)
    by_key = getattr(spec, "memo_identity", None) is not None
    trusted = getattr(spec, "memo_identity_trusted", False)
    if memo is None:
        if trusted:
            return "memo_identity_trusted", "applies to memoize_by only; remove it"
        return None
    if by_key:
        return "memoize_by", "give memo_identity: message_key or memoize_by, not both"
    if not trusted:
        return "memoize_by", (
            f"memoize_by reads the device id from field {memo!r}, and {FORGEABLE}; use "
            "memo_identity: message_key (the Kafka message key, set by an authenticated "
            "collector), or set memo_identity_trusted: true if no untrusted party writes "
            "the topic"
        )
    if memo == spec.name:
        return "memoize_by", (
            "a field cannot be memoized by itself; name the field that identifies "
            "the device, e.g. a device id of kind drop"
        )
    if memo not in kinds:
        return "memoize_by", (
            f"no field named {memo!r}; list the device id field "
            "(kind drop keeps it out of the output) or fix the name"
        )
    if kinds[memo] not in MEMO_KINDS:
        return "memoize_by", (
            f"field {memo!r} is of kind {kinds[memo]}, which is released with noise: "
            "memo answers keyed by its raw value would fall into one group per raw "
            "value and give it away whatever its epsilon; memoize by the device id "
            "field of kind drop (kept out of the output) or public, or use "
            "memo_identity: message_key"
        )
    return None


def check_memo_references(fields: Sequence[_NamedField]) -> None:
    """Every ``memoize_by`` is vouched for and names another field that can hold a device id.

    Raises a ValidationError located at ``fields[i].<option>`` (one entry per
    problem), so the loader reports ``fields[3] (state).memoize_by: ...``.
    """
    kinds = {spec.name: getattr(spec, "kind", "") for spec in fields}
    problems: list[InitErrorDetails] = []
    for position, spec in enumerate(fields):
        problem = _memo_problem(spec, kinds)
        if problem is None:
            continue
        option, message = problem
        problems.append(
            InitErrorDetails(
                type=PydanticCustomError("memoize_by", message),
                loc=("fields", position, option),
                input=getattr(spec, option),
            )
        )
    if problems:
        # a model validator cannot locate a ValueError; a ValidationError passes through
        raise ValidationError.from_exception_data("AppConfig", problems)
