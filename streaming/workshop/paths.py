"""The source checkout the workshop runs from (it is in no wheel): its processes start with it on
PYTHONPATH and run its deploy/ scripts."""

from __future__ import annotations

from pathlib import Path

__all__ = ["ROOT"]

ROOT = Path(__file__).resolve().parents[2]
