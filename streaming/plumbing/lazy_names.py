"""A package face whose names are imported on first use (PEP 562 `__getattr__`).

For the faces that Spark's Python processes import through: a worker or a planner must not load,
with the package, the modules only the driver needs (the bus client, the store); and for the shelves
of the ground floor (plumbing, records), whose face is their modules, each loaded when first named.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["load_on_first_use", "modules_on_first_use"]


def load_on_first_use(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The `__getattr__` of `package`: `homes` maps each public name to its submodule. A name is
    kept in the package once loaded, so it is looked up only once."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{homes[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


def modules_on_first_use(package: str, modules: Sequence[str]) -> Callable[[str], Any]:
    """The `__getattr__` of a package whose face is its `modules`: `package.name` imports the module."""

    def __getattr__(name: str) -> Any:
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return importlib.import_module(f"{package}.{name}")

    return __getattr__
