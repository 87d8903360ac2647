"""The reference detector of bench/reference/, loaded for the tests that compare the engine with it."""

from __future__ import annotations

import importlib.util
import json
import sys
from types import ModuleType
from typing import Any

from streaming.records.contract import Event, event_to_dict
from support.paths import ROOT

__all__ = ["REFERENCE", "as_lines", "reference_alerts"]


def _load() -> ModuleType:
    # bench/ is not a package on the path: the reference package is loaded from its folder.
    folder = ROOT / "bench" / "reference"
    spec = importlib.util.spec_from_file_location("reference", folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its modules import each other relatively
    spec.loader.exec_module(module)
    return module


REFERENCE = _load()


def reference_alerts(lines: list[str] | list[bytes]) -> list[dict[str, Any]]:
    alerts, late, skipped = REFERENCE.detect(lines)
    assert (late, skipped) == (0, 0)
    return alerts


def as_lines(events: list[Event]) -> list[str]:
    return [json.dumps(event_to_dict(e)) for e in events]
