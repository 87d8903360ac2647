"""The field checks of the event contract (streaming/records/contract.py): each refusal names its reason
(`Rejected`), with the field's path, and no value of any type escapes as anything but a refusal."""

from __future__ import annotations

from typing import Any

from streaming.plumbing.errors import FleetwatchError

__all__ = ["INT32", "INT64", "Rejected", "check_field", "check_int", "check_str"]

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


class Rejected(FleetwatchError, ValueError):
    """A message that breaks the contract; `reason` is a short machine-readable code."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
        # For a `ts` refused for being in the future: the event time and the collector that sent
        # it (when its `source` is a valid one), so the parse stage can show each source's skew.
        self.ts: int | None = None
        self.source: str | None = None


_MISSING = object()


def check_field(obj: dict[str, Any], name: str, kind: type | tuple[type, ...], *, required: bool = True,
           nullable: bool = False, where: str = "") -> Any:
    # The hot path of every message: the error path (and its field path) is built only on error.
    value = obj.get(name, _MISSING)
    if value.__class__ is kind:
        return value
    if value is _MISSING:
        if required:
            raise Rejected(f"missing_field:{where}{name}")
        return None
    if value is None:
        if nullable or not required:
            return None
        raise Rejected(f"wrong_type:{where}{name}", "null")
    # bool is an int in Python; the contract's integers are never booleans.
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise Rejected(f"wrong_type:{where}{name}", "boolean")
    if not isinstance(value, kind):
        raise Rejected(f"wrong_type:{where}{name}", type(value).__name__)
    return value


def check_int(obj: dict[str, Any], name: str, bounds: tuple[int, int], *, required: bool = True,
         where: str = "") -> Any:
    value = obj.get(name)
    if value.__class__ is not int:  # absent, null or of another type: check_field says which
        value = check_field(obj, name, int, required=required, where=where)
        if value is None:
            return None
    if bounds[0] <= value <= bounds[1]:
        return value
    width = 32 if bounds == INT32 else 64
    raise Rejected(f"out_of_range:{where}{name}", f"{value} does not fit in a signed {width}-bit integer")


def check_str(obj: dict[str, Any], name: str, limit: int, *, required: bool = True, nullable: bool = False,
         where: str = "") -> Any:
    value = obj.get(name)
    if value.__class__ is not str:
        value = check_field(obj, name, str, required=required, nullable=nullable, where=where)
        if value is None:
            return None
    if len(value) <= limit:
        return value
    raise Rejected(f"too_long:{where}{name}", f"{len(value)} characters, at most {limit}")
