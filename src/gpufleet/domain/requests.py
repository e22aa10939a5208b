"""GPU requests: their states, the legal transitions, and what a request asks for.

docs/design.md, "Concepts": `pending` (awaiting approval) → `approved` (waiting for capacity or its
start time) → `active` → `released` | `expired`; `rejected` and `cancelled` end it early. The
transition table is data, so the services, the tests (every pair) and the docs read one source.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpufleet.domain.errors import Conflict, InvalidInput
from gpufleet.domain.gpu_models import model as catalogue_model

REQUEST_CODE_PREFIX = "GR-"
REQUEST_CODE_OFFSET = 1000  # GR-1001 is the first request: ids look like tickets, not counters
POOL_CODE_PREFIX = "POOL-"


class PoolState(StrEnum):
    """A pool is asked for (`pending`), then approved (`active`) or `rejected`; an active
    pool is `ended` by its project or an operator, which stops its charge (docs/billing.md)."""

    PENDING = "pending"
    ACTIVE = "active"
    REJECTED = "rejected"
    ENDED = "ended"


class RequestState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    ACTIVE = "active"
    RELEASED = "released"
    EXPIRED = "expired"
    REJECTED = "rejected"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES

    @property
    def holds_units(self) -> bool:
        return self is RequestState.ACTIVE


FINAL_STATES = frozenset({RequestState.RELEASED, RequestState.EXPIRED, RequestState.REJECTED,
                          RequestState.CANCELLED})

# (from, to) -> the event name the audit log records for it.
TRANSITIONS: dict[tuple[RequestState, RequestState], str] = {
    (RequestState.PENDING, RequestState.APPROVED): "request.approved",
    (RequestState.PENDING, RequestState.REJECTED): "request.rejected",
    (RequestState.PENDING, RequestState.CANCELLED): "request.cancelled",
    (RequestState.APPROVED, RequestState.ACTIVE): "request.activated",
    (RequestState.APPROVED, RequestState.CANCELLED): "request.cancelled",
    (RequestState.APPROVED, RequestState.EXPIRED): "request.expired",
    (RequestState.ACTIVE, RequestState.RELEASED): "request.released",
    (RequestState.ACTIVE, RequestState.EXPIRED): "request.expired",
}


def transition_event(current: RequestState, target: RequestState, code: str) -> str:
    """The audit event of a legal transition; a 409 naming both states otherwise."""
    event = TRANSITIONS.get((current, target))
    if event is None:
        raise Conflict(f"{code} is {current.value}; it cannot become {target.value}",
                       code="invalid_transition",
                       details={"request": code, "state": current.value,
                                "target": target.value})
    return event


def request_code(request_id: int) -> str:
    return f"{REQUEST_CODE_PREFIX}{request_id + REQUEST_CODE_OFFSET}"


def request_id_from_code(code: str) -> int | None:
    """`GR-1042` → 42; None for anything that is not a request code."""
    text = code.strip().upper()
    if not text.startswith(REQUEST_CODE_PREFIX):
        return None
    return _stored_id(text[len(REQUEST_CODE_PREFIX):], offset=REQUEST_CODE_OFFSET)


def pool_code(pool_id: int) -> str:
    return f"{POOL_CODE_PREFIX}{pool_id}"


def pool_id_from_code(code: str) -> int | None:
    """`POOL-7` → 7; None for anything that is not a pool code."""
    text = code.strip().upper()
    if not text.startswith(POOL_CODE_PREFIX):
        return None
    return _stored_id(text[len(POOL_CODE_PREFIX):], offset=0)


_MAX_STORED_ID = 2**63 - 1  # ids are 64-bit: a larger number names nothing (a 404, not a 400)


def _stored_id(digits: str, *, offset: int) -> int | None:
    """The id a code's number names, or None: ASCII digits only (`str.isdigit` also takes
    '²', which `int` refuses), within the ids the store can hold."""
    if not (digits.isascii() and digits.isdigit()):
        return None
    found = int(digits) - offset
    return found if 0 < found <= _MAX_STORED_ID else None


class FlavourKind(StrEnum):
    """How a unit is handed out: the same words as the placement engine's unit kinds."""

    WHOLE = "whole"
    MIG = "mig"
    SHARED = "shared"


@dataclass(frozen=True)
class Flavour:
    """A concrete flavour: what a quota and a pool are counted in (docs/design.md, "Concepts").

    Keys read as an operator writes them: `H100-80GB` (whole GPUs), `H100-80GB/1g.10gb`
    (a MIG profile of that model), `L40S-48GB/shared` (fractions of shared GPUs). Whole and
    MIG units count 1000 milli each; a shared unit counts its fraction.
    """

    kind: FlavourKind
    model: str
    mig_profile: str | None = None

    @property
    def key(self) -> str:
        if self.kind is FlavourKind.WHOLE:
            return self.model
        if self.kind is FlavourKind.MIG:
            return f"{self.model}/{self.mig_profile}"
        return f"{self.model}/shared"

    def __str__(self) -> str:
        return self.key


def parse_flavour(key: str) -> Flavour:
    """A flavour key checked against the catalogue; 400 naming what is wrong."""
    text = key.strip()
    model_key, _, rest = text.partition("/")
    found = catalogue_model(model_key)
    if found is None:
        raise InvalidInput(f"unknown GPU model '{model_key}' in flavour '{key}'",
                           code="unknown_model", details={"flavour": key})
    if not rest:
        return Flavour(FlavourKind.WHOLE, found.key)
    if rest == "shared":
        return Flavour(FlavourKind.SHARED, found.key)
    if found.mig is None:
        raise InvalidInput(f"{found.key} has no MIG profiles; flavour '{key}' cannot exist",
                           code="unknown_mig_profile", details={"flavour": key})
    if found.mig.profile_named(rest) is None:
        names = ", ".join(p.name for p in found.mig.profiles)
        raise InvalidInput(f"{found.key} has no MIG profile '{rest}' (it has: {names})",
                           code="unknown_mig_profile", details={"flavour": key})
    return Flavour(FlavourKind.MIG, found.key, rest)


def unit_milli(kind: FlavourKind, milli: int) -> int:
    """What one unit counts against a quota or pool: 1000, or a shared unit's fraction."""
    return milli if kind is FlavourKind.SHARED else 1000
