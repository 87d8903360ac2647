"""The house rules of issues 18 and 29, checked on the source tree: each stage is entered through its
face (its package's `__init__`), imports point only down the floors (`FLOORS`) and so close no circle,
the CLI is imported by the entry point only, the dashboard does not reach into the notifier, and no
module grows past 500 lines. `python tests/test_house.py` prints the import map's size."""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import inspect
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for top in ("streaming", "dashboard", "bench") for p in (ROOT / top).rglob("*.py"))
# Stages: packages under streaming/ (and the dashboard). A room of the import map is a stage or a
# module directly in streaming/.
STAGES = sorted(p.name for p in (ROOT / "streaming").iterdir() if (p / "__init__.py").is_file())
MAX_LINES = 500

# The floors, bottom first: a room imports only rooms on floors below its own. /metrics follows
# client_python's layout: its counters (metrics.counters, no import of the project) are what the
# sinks and the progress recorder count into, its exposition reads the store; the job serves it.
# As in Burrow, what runs is apart from who starts it: the pipeline graph (what Spark's workers
# run) is below the job (the coordinator that starts, runs and stops it, the console its
# observer), and the programs (demo, check-config, the spark-submit driver) stand on the job.
FLOORS: list[tuple[str, set[str]]] = [
    # The ground floor (issue 46.2): three groups, not two dozen loose modules.
    ("plumbing", {"plumbing"}),  # clock, errors, logs, redact, resilience, ports, jars: tools that know no Kafka
    ("records", {"records"}),  # what one stage hands the next: events, alerts, the job's output
    ("configuration", {"config"}),  # the YAML file, section by section
    ("rules, bus", {"detect", "bus"}),
    ("store, telemetry in, readers", {"store", "collect", "source"}),
    ("on the store and the probe", {"metrics", "notify", "kraft"}),
    ("the job's outputs, the dashboard", {"sinks", "dashboard"}),
    ("pipeline graph", {"pipeline"}),
    ("job", {"job"}),
    # tests, benches and the demo's --real-kafka only: no product module imports it (a test checks)
    ("the workshop", {"workshop"}),
    ("programs", {"ops", "demo"}),
    ("entry point", {"cli"}),
]


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A source file's syntax tree, parsed once for all the rules of a run (the tree does not change under it)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: Path) -> list[str]:
    tree = _tree(path)
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


def _room(module: str) -> str | None:
    """The room of a module of the project: its stage, or the module itself when directly in streaming/."""
    parts = module.split(".")
    if parts[0] == "dashboard":
        return "dashboard"
    if parts[0] == "streaming" and len(parts) > 1 and (parts[1] in STAGES or len(parts) == 2):
        return parts[1]
    return None


def import_map() -> dict[str, set[str]]:
    """Room -> the other rooms it imports (lazy imports and TYPE_CHECKING ones too)."""
    arrows: dict[str, set[str]] = defaultdict(set)
    for path in SOURCES:
        if (room := _room(_module(path))) is None:
            continue
        arrows[room] |= {other for name in _imports(path) if (other := _room(name)) not in (None, room)}
    return dict(arrows)


def _floor(room: str) -> int:
    return next(i for i, (_, rooms) in enumerate(FLOORS) if room in rooms)


def _upward(arrows: dict[str, set[str]]) -> list[str]:
    return sorted(f"{room} imports {other}" for room, others in arrows.items() for other in others
                  if _floor(other) >= _floor(room))


def _circles(arrows: dict[str, set[str]]) -> list[set[str]]:
    """The groups of rooms that reach each other through imports (strongly connected, more than one room)."""
    reach = {room: set(others) for room, others in arrows.items()}
    changed = True
    while changed:  # transitive closure: a few dozen rooms
        changed = False
        for seen in reach.values():
            more = set().union(*(reach.get(other, set()) for other in seen)) - seen
            if more:
                seen |= more
                changed = True
    groups = {frozenset({room} | {other for other in seen if room in reach.get(other, ())})
              for room, seen in reach.items() if room in seen}
    return [set(group) for group in groups]


def _module_imports(path: Path) -> set[str]:
    """The modules of the project that the module at `path` imports (relative imports resolved).
    `from package import submodule` imports the submodule: the package's face is not needed for it."""
    module, modules = _module(path), _modules()
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[:len(package) - node.level + 1], *([base] if base else [])])
            submodules = {f"{base}.{alias.name}" for alias in node.names} & modules
            found |= submodules if len(submodules) == len(node.names) else {base, *submodules}
    return (found & modules) - {module}


@functools.cache
def _modules() -> frozenset[str]:
    return frozenset(_module(p) for p in SOURCES)


def module_map() -> dict[str, set[str]]:
    """Module -> the modules of the project it imports (lazy and TYPE_CHECKING imports too)."""
    return {_module(p): _module_imports(p) for p in SOURCES}


def test_every_room_has_a_floor():
    rooms = set(import_map()) | {other for others in import_map().values() for other in others}
    placed = [room for _, floor in FLOORS for room in floor]
    assert sorted(rooms - set(placed)) == []
    assert len(placed) == len(set(placed)), "a room on two floors"


def test_imports_point_only_down_the_floors():
    assert _upward(import_map()) == []


def test_no_rooms_import_each_other_in_a_circle():
    assert _circles(import_map()) == []


def test_no_modules_import_each_other_in_a_circle():
    """Inside a stage too: a module that imports one that imports it back (even lazily, even for
    types only) is a knot a reader cannot start from either end of."""
    assert sorted(sorted(group) for group in _circles(module_map())) == []


def test_the_product_starts_a_job_in_one_place():
    """Burrow's core/burrow.go: run, demo, replay and the spark-submit driver start Spark, a job's
    query and its supervision through the job coordinator, not each in a start sequence of its own."""
    starts = {"spark_session", "start_live_query", "start_recorded_query", "Supervisor"}
    callers = sorted({_module(path) for path in SOURCES if not path.is_relative_to(ROOT / "bench")
                      for node in ast.walk(_tree(path)) if isinstance(node, ast.Call)
                      and getattr(node.func, "id", getattr(node.func, "attr", None)) in starts})
    assert callers == ["streaming.job.coordinator"]


def test_every_exception_class_derives_from_fleetwatch_error():
    """A class that names a built-in exception as a base names a kind of streaming/plumbing/errors.py too
    (`class Rejected(FleetwatchError, ValueError)`): the CLI's mapping then covers it."""
    builtin = {name for name, value in vars(builtins).items() if isinstance(value, type)
               and issubclass(value, BaseException)}
    outside = []
    for path in SOURCES:
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.ClassDef) or (_module(path), node.name) == ("streaming.plumbing.errors",
                                                                                     "FleetwatchError"):
                continue
            bases = [ast.unparse(base) for base in node.bases]
            if any(base in builtin for base in bases) and all(base in builtin for base in bases):
                outside.append(f"{_module(path)}.{node.name}({', '.join(bases)})")
    assert outside == []


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
    its `__all__` declares; what is not in it is the stage's own business. A shelf of the ground
    floor (plumbing, records) or the workshop declares its modules: each is entered by itself."""
    through_the_wall = []
    for path in SOURCES:
        importer = _module(path)
        own = _stage_of(importer)
        for name in _imports(path):
            stage = _stage_of(name)
            if stage is None or stage == own or stage == "dashboard":
                continue
            face, rest = _face_of(name)
            package = importlib.import_module(face)
            exported = getattr(package, "__all__", ())
            first = rest.split(".")[0]
            if rest and rest not in exported and not (first in exported
                                                      and inspect.ismodule(getattr(package, first))):
                through_the_wall.append(f"{importer} imports {name}")
    assert through_the_wall == []


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_declares_its_face(stage):
    face = importlib.import_module(f"streaming.{stage}")
    assert getattr(face, "__all__", None), f"streaming/{stage}/__init__.py declares no __all__"
    missing = [name for name in face.__all__ if not hasattr(face, name)]
    assert missing == []


def test_other_stages_reach_the_stores_tables_through_its_functions():
    """Issue 46.5: the notifier's lease called the store's private `_insert`, and the lease, /metrics and
    the console built SQL on the store's tables. The store's door is its functions: no module of
    streaming/ outside streaming/store imports a table (or `metadata`) or a private name from it, or
    calls a private method of `Store`. (The dashboard's read side, dashboard/queries/, still reads the
    tables itself, and so does the workshop, which checks what the product wrote.)"""
    from sqlalchemy import MetaData, Table

    store = importlib.import_module("streaming.store")
    tables = {name for name in store.__all__ if isinstance(getattr(store, name), Table | MetaData)}
    private = {name for name in vars(store.Store) if name.startswith("_") and not name.startswith("__")}
    inside = []
    for path in SOURCES:
        if not path.is_relative_to(ROOT / "streaming") or any(
                path.is_relative_to(ROOT / "streaming" / room) for room in ("store", "workshop")):
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("streaming.store"):
                inside += [f"{_module(path)} imports {alias.name}" for alias in node.names
                           if alias.name in tables or alias.name.startswith("_")]
            elif (isinstance(node, ast.Attribute) and node.attr in private
                  and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
                inside.append(f"{_module(path)}:{node.lineno} calls Store.{node.attr}")
    assert inside == []


def test_no_module_is_over_500_lines():
    tests = sorted((ROOT / "tests").rglob("*.py"))
    long = [f"{p.relative_to(ROOT)}: {n}" for p in [*SOURCES, *tests]
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES]
    assert long == []


if __name__ == "__main__":  # the numbers of the import map, for a note
    rooms = import_map()
    every = set(rooms) | {other for others in rooms.values() for other in others}
    floors = {room for _, floor in FLOORS for room in floor}
    unplaced = sorted(every - floors)
    upward = _upward(rooms) if not unplaced else []
    modules = module_map()
    print(f"rooms {len(every)}, arrows {sum(map(len, rooms.values()))}, upward imports {len(upward)}, "
          f"circles {len(_circles(rooms))}; modules {len(modules)}, module arrows "
          f"{sum(map(len, modules.values()))}, module circles {len(_circles(modules))}"
          + (f"; not on a floor: {unplaced}" if unplaced else ""))
    for line in upward + [" <-> ".join(sorted(group)) for group in [*_circles(rooms), *_circles(modules)]]:
        print(" ", line)


def _kind_literals(path: Path, kinds: set[str]) -> list[str]:
    """String literals of `kinds` where an output row's kind is written or read: a 4-tuple's first
    element, a comparison, or a lookup in a mapping whose name says it is by kind."""
    found = []
    for node in ast.walk(_tree(path)):
        candidates: list[ast.expr] = []
        if isinstance(node, ast.Tuple) and len(node.elts) == 4:
            candidates.append(node.elts[0])
        elif isinstance(node, ast.Compare):
            candidates += [node.left, *node.comparators]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name) and "kind" in node.func.value.id):
            candidates += node.args[:1]
        found += [f"{path.relative_to(ROOT)}:{c.lineno}: {c.value!r}" for c in candidates
                  if isinstance(c, ast.Constant) and c.value in kinds]
    return found


def test_the_kinds_of_the_jobs_output_are_spelled_in_job_output_only():
    """Issue 46.1: the job's output was 11 string kinds written by the pipeline and read back by the
    sink by string. streaming/records/job_output.py is now the one place that spells them: no module writes or
    reads a kind by its literal (the kinds that are also common words, "broker", "cluster", "target",
    "controller", only where output rows are made and read: the pipeline and the sinks)."""
    from streaming.records.job_output import Kind

    kinds = {value for name, value in vars(Kind).items() if not name.startswith("_")}
    words = {Kind.BROKER, Kind.CLUSTER, Kind.TARGET, Kind.CONTROLLER}
    offenders = []
    for path in SOURCES:
        if path.name == "job_output.py":
            continue
        rows_side = path.parent.name in ("pipeline", "sinks")
        offenders += _kind_literals(path, kinds if rows_side else kinds - words)
    assert offenders == []


GROUND_FLOOR = ("plumbing", "records", "config")


def test_the_ground_floor_is_three_groups_each_naming_its_rooms_at_its_door():
    """Issue 46.2: a newcomer sees three things on the ground floor, not two dozen loose modules. Only
    the entry point sits directly in streaming/; the ground floor's floors hold the three groups, and
    each group's door (its package docstring) names every module it holds."""
    loose = sorted(p.stem for p in (ROOT / "streaming").glob("*.py") if p.stem not in ("__init__", "cli"))
    assert loose == []
    assert [room for _, rooms in FLOORS[:3] for room in sorted(rooms)] == list(GROUND_FLOOR)
    unnamed = []
    for group in GROUND_FLOOR:
        door = ast.get_docstring(_tree(ROOT / "streaming" / group / "__init__.py")) or ""
        unnamed += [f"{group}.{p.stem}" for p in sorted((ROOT / "streaming" / group).glob("*.py"))
                    if p.stem != "__init__" and f"`{p.stem}`" not in door]
    assert unnamed == []


def test_the_product_leaves_the_workshop_out():
    """Issue 46.3: what only the tests, the benches and the demo's --real-kafka use is in
    streaming/workshop/, which no product module imports (the demo's --real-kafka only, lazily and
    with a one-line refusal when it is missing), which the wheel leaves out, and the benches take
    their helpers from it, not from tests/."""
    import tomllib

    from setuptools import find_packages

    product = [p for p in SOURCES if not p.is_relative_to(ROOT / "bench")
               and not p.is_relative_to(ROOT / "streaming" / "workshop")]
    importers = sorted({_module(p) for p in product for n in _imports(p) if n.startswith("streaming.workshop")})
    assert importers == ["streaming.demo.program"]
    module_level = [n for node in _tree(ROOT / "streaming" / "demo" / "program.py").body
                    if isinstance(node, ast.ImportFrom) for n in [node.module or ""]
                    if n.startswith("streaming.workshop")]
    assert module_level == []
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    shipped = find_packages(str(ROOT), include=found["include"], exclude=found.get("exclude", ()))
    assert "streaming.config" in shipped and not [p for p in shipped if p.startswith("streaming.workshop")]
    borrowing = [f"{p.relative_to(ROOT)}: {n}" for p in sorted((ROOT / "bench").rglob("*.py"))
                 for n in _imports(p) if n == "support" or n.startswith("support.")]
    borrowing += [str(p.relative_to(ROOT)) for p in sorted((ROOT / "bench").rglob("*.py"))
                  if '"tests"' in p.read_text(encoding="utf-8")]
    assert borrowing == []
