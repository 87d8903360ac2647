"""Ages, times and numbers as the pages show them."""

from __future__ import annotations

import datetime as dt

import pandas as pd

__all__ = ["format_age", "format_number", "format_ts"]


def format_age(ms: float | None) -> str:
    """An age or duration for humans: "2.1 s", "4.0 min", "3.2 h", "1.5 d"."""
    if pd.isna(ms):
        return "—"
    seconds = max(float(ms), 0.0) / 1000
    for limit, unit, size in ((60, "s", 1), (3600, "min", 60), (86400, "h", 3600)):
        if seconds < limit:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds / 86400:.1f} d"


def format_ts(ms: int | None) -> str:
    """Epoch milliseconds as a UTC time ("2025-11-22 08:26:40Z")."""
    if ms is None:
        return "—"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def format_number(value: float | None, digits: int = 0) -> str:
    """A number with thousands separators and `digits` decimals; "—" for none."""
    return "—" if value is None else f"{value:,.{digits}f}"
