"""What one field kind registers: a ``FieldKind`` bundling every per-kind part.

The plan builder (``privstream.kinds.plan``), ``explain`` and ``estimate
--candidates`` ask a field's ``FieldKind``, and the pipeline its
``FieldCodec``; none switches on kinds. A registration is keyed by the
config's ``kind`` and ``mechanism`` (``None`` for a kind without one,
``public``); the layers above keep their per-kind parts in tables of their
own under the same key (``privstream.estimate.by_kind``,
``privstream.audit.by_kind``), each checked against the registry when it
loads. A noised kind must give every part, a missing one is a
``RegistryError`` when the registry loads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from numpy.typing import NDArray

from privstream.config import Guarantee
from privstream.errors import RegistryError
from privstream.mechanisms.selection import VARIANCE_N
from privstream.pipeline.columns import ColumnParser
from privstream.pipeline.handlers import FieldHandler
from privstream.pipeline.plan import FieldCodec

if TYPE_CHECKING:
    from pydantic import BaseModel


@dataclass(frozen=True, kw_only=True)
class AutoChoice:
    """What ``auto`` picks for one categorical field, and why."""

    mechanism: str
    #: summed frequency-vector variance of each candidate at ``n`` records (selection)
    variances: dict[str, float]
    n: int = VARIANCE_N
    #: why the candidates were narrowed, or None
    restricted: str | None = None


@dataclass(frozen=True, kw_only=True)
class MemoSupport:
    """How a kind's memo token is built (``privstream.pipeline.plan.MemoPlan``).

    The token holds the *true value*, never a position: for a kind whose
    ``parse`` returns a domain position, ``domain`` gives the domain the
    position indexes (its values enter the token); for a kind whose
    ``parse`` returns the value itself it returns None.
    """

    domain: Callable[[Any], tuple[Any, ...] | None]
    #: leading words of each row that depend on the identity only (a hash seed)
    identity_words: int = 0


def mechanism_domain(handler: Any) -> tuple[Any, ...]:
    """``MemoSupport.domain`` of kinds that parse to positions in their mechanism's domain."""
    domain: tuple[Any, ...] = handler.mechanism.domain
    return domain


#: what every noised kind must register
_NOISED_PARTS = ("explain",)


#: the handler type a registration builds; every part of it takes that handler
H = TypeVar("H", bound=FieldHandler)


@dataclass(frozen=True, kw_only=True)
class FieldKind(Generic[H]):
    """One registration: a field kind with one mechanism, and everything the code needs of it.

    Generic over the handler type ``build`` returns, so that mypy checks every
    other part of the registration against that handler (``FieldKind[RealHandler]``).
    """

    kind: str
    #: the config's ``mechanism`` value, None for a kind without noise (public)
    mechanism: str | None
    #: the pydantic config model (``privstream.config.fields``)
    model: type[BaseModel]
    #: (spec, resolved share or None) -> handler: calibrates the mechanism (the factory)
    build: Callable[[Any, Guarantee | None], H]
    #: the fast path's column parser (``privstream.pipeline.columns``)
    column: ColumnParser
    #: the JSON text of each released value of a column (``privstream.pipeline.encode``)
    texts: Callable[[H, list[Any]], list[bytes]]
    #: memo tokens; None: the kind cannot be memoized
    memo: MemoSupport | None = None
    #: handler -> the ``explain`` entry of its mechanism; None only without noise
    explain: Callable[[H], dict[str, Any]] | None = None
    #: (handler, count) -> canary inputs for the error metrics (``privstream.pipeline.canary``);
    #: None: the kind's error is not measured
    canary: Callable[[H, int], NDArray[Any]] | None = None
    #: (handler, candidate values) -> those the field can never report; None: the kind
    #: takes no ``estimate --candidates`` (it estimates its whole domain)
    candidates: Callable[[H, tuple[str, ...]], list[str]] | None = None

    def __post_init__(self) -> None:
        if self.mechanism is None:
            return
        missing = [part for part in _NOISED_PARTS if getattr(self, part) is None]
        if missing:
            raise RegistryError(
                f"field kind {self.label}: the registration lacks {', '.join(missing)}; "
                "a noised kind must say how explain describes it (privstream.kinds)"
            )

    @property
    def label(self) -> str:
        return self.kind if self.mechanism is None else f"{self.kind} ({self.mechanism})"

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.kind, self.mechanism)

    @property
    def codec(self) -> FieldCodec:
        """What the pipeline keeps of this registration in each ``PlannedField``."""
        return FieldCodec(column=self.column, texts=self.texts, canary=self.canary)


def calibrated(kind: FieldKind[Any] | str, share: Guarantee | None) -> tuple[float, float]:
    """(epsilon, delta) of a noised field's share; a noised field always has one."""
    if share is None:
        label = kind if isinstance(kind, str) else kind.label
        raise RegistryError(f"field kind {label}: built without a budget share")
    return share.epsilon, share.delta


def describe(handler: FieldHandler) -> dict[str, Any]:
    """The ``explain`` entry of a handler's mechanism, read from the mechanism object."""
    mech = handler.mechanism
    if mech is None:
        raise RegistryError(f"field {handler.name!r}: describe needs a mechanism")
    return {
        "mechanism": mech.name,
        "epsilon": mech.epsilon,
        "delta": mech.delta,
        "estimator_variance_n1000": mech.estimator_variance(1000),
        "params": mech.params(),
        "expected_error": mech.expected_error,
        "gamma_lower_bound": mech.gamma_lower_bound,
        "metric": mech.metric,
    }
