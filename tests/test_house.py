"""The house rules of issue 18, checked on the source tree: each stage is entered through its face
(its package's `__init__`), the CLI is imported by the entry point only, the dashboard does not
reach into the notifier, and no module grows past 500 lines."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for top in ("streaming", "dashboard", "bench") for p in (ROOT / top).rglob("*.py"))
# Stages: packages under streaming/ (and the dashboard); modules directly in streaming/ are the ground floor.
STAGES = sorted(p.name for p in (ROOT / "streaming").iterdir() if (p / "__init__.py").is_file())
MAX_LINES = 500


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def _stage_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "dashboard":
        return "dashboard"
    if parts[0] == "streaming" and len(parts) > 1 and parts[1] in STAGES:
        return parts[1]
    return None


def test_the_cli_is_imported_by_no_module():
    importers = [_module(p) for p in SOURCES if any(n == "streaming.cli" or n.startswith("streaming.cli.")
                                                    for n in _imports(p))]
    assert importers == []


def test_the_dashboard_does_not_reach_into_the_notifier():
    importers = [_module(p) for p in SOURCES if p.is_relative_to(ROOT / "dashboard")
                 and any(n.startswith("streaming.notify") for n in _imports(p))]
    assert importers == []


def _face_of(name: str) -> tuple[str, str]:
    """The innermost package `name` is in, and the rest of the name after it."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        if (ROOT.joinpath(*parts[:cut]) / "__init__.py").is_file():
            return ".".join(parts[:cut]), ".".join(parts[cut:])
    return name, ""


def test_other_stages_enter_a_stage_through_its_face():
    """A stage (or a stage's sub-stage, like collect.probe) is imported as its package, by a name
    its `__all__` declares; what is not in it is the stage's own business."""
    through_the_wall = []
    for path in SOURCES:
        importer = _module(path)
        own = _stage_of(importer)
        for name in _imports(path):
            stage = _stage_of(name)
            if stage is None or stage == own or stage == "dashboard":
                continue
            face, rest = _face_of(name)
            exported = getattr(importlib.import_module(face), "__all__", ())
            if rest and rest not in exported:
                through_the_wall.append(f"{importer} imports {name}")
    assert through_the_wall == []


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_declares_its_face(stage):
    face = importlib.import_module(f"streaming.{stage}")
    assert getattr(face, "__all__", None), f"streaming/{stage}/__init__.py declares no __all__"
    missing = [name for name in face.__all__ if not hasattr(face, name)]
    assert missing == []


def test_no_module_is_over_500_lines():
    tests = sorted((ROOT / "tests").rglob("*.py"))
    long = [f"{p.relative_to(ROOT)}: {n}" for p in [*SOURCES, *tests]
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES]
    assert long == []
