"""The bounds every section of the configuration keeps (issue 27.2), and its models' one base:
unknown keys are errors and a value is never coerced (`session_timeout_ms: true` would be 1 ms)."""

from __future__ import annotations

from pydantic import AfterValidator, BaseModel, ConfigDict

__all__ = ["DAY_MS", "MAX_DAYS", "MAX_DURATION_MS", "MAX_FLAP_THRESHOLD", "MAX_STATE_TTL_MS", "Strict",
           "off_or_at_least"]

# Upper bounds of the numeric settings (issue 27.2): past them a value is a typo or a unit mistake,
# and near 2**63 it overflows once added to a timestamp (Spark's timers, the store's int64 columns,
# Python's datetime). Every numeric key has one; `check-config` and every command name the key.
DAY_MS = 86_400_000
MAX_DURATION_MS = 30 * DAY_MS  # every rule window, timeout and grace, the lateness and the clock skew
MAX_STATE_TTL_MS = 365 * DAY_MS  # rules.state_ttl_ms: longer than every window, at most a year
MAX_FLAP_THRESHOLD = 10_000
MAX_DAYS = 3650  # retention, in days: ten years


class Strict(BaseModel):
    """The base of every section: extra keys forbidden, frozen, strict types."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def off_or_at_least(minimum: int, why: str = "") -> AfterValidator:
    """The check of a setting that is 0 (off) or at least `minimum` (`why`: what a smaller one would do)."""

    def check(value: int | None) -> int | None:
        if value is not None and 0 < value < minimum:
            raise ValueError(f"must be 0 (off) or at least {minimum}" + (f": {why}" if why else ""))
        return value

    return AfterValidator(check)
