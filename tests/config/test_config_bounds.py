"""Every numeric setting has an upper bound (issue 27.2).

`store.retention.history_days: .inf` crashed the job's retention round (OverflowError), and a
`rules.state_ttl_ms` near 2**63 overflows once added to a timestamp. Past its bound a value is
refused like any other bad value: one line naming the file, the line and the key, from
`fleetwatch check-config` and from `fleetwatch run --config` (exit 2); a value at the bound is taken.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel

from streaming.config import MAX_DURATION_MS, MAX_STATE_TTL_MS, ConfigError, FleetwatchConfig, load_config


def _numeric_fields(model: type[BaseModel], prefix: tuple[str | int, ...] = ()) -> list[tuple[tuple, Any]]:
    """(path, FieldInfo) of every int and float setting, walking nested sections (a list's item 0)."""
    out = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        union = isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
        args = [a for a in typing.get_args(annotation) if a is not type(None)] if union else [annotation]
        (kind,) = args if len(args) == 1 else (annotation,)
        if typing.get_origin(kind) is list and isinstance(typing.get_args(kind)[0], type) \
                and issubclass(typing.get_args(kind)[0], BaseModel):
            out += _numeric_fields(typing.get_args(kind)[0], (*prefix, name, 0))
        elif isinstance(kind, type) and issubclass(kind, BaseModel):
            out += _numeric_fields(kind, (*prefix, name))
        elif kind in (int, float):
            out.append(((*prefix, name), info))
    return out


FIELDS = _numeric_fields(FleetwatchConfig)


def _bound(info, kind: type) -> tuple[float | None, float | None]:
    low = next((m.ge if isinstance(m, Ge) else m.gt for m in info.metadata if isinstance(m, Ge | Gt)), None)
    high = next((m.le if isinstance(m, Le) else m.lt - 1 for m in info.metadata if isinstance(m, Le | Lt)), None)
    return low, high


def _kind(info) -> type:
    return float if float in (info.annotation, *typing.get_args(info.annotation)) else int


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def _yaml(values: dict[tuple, Any]) -> tuple[str, dict[tuple, int]]:
    """A config file setting `values` (one key a line), and the line of each."""
    tree: dict = {}
    for path, value in values.items():
        node = tree
        for part, nxt in itertools.pairwise(path):
            node = node.setdefault(part, [{"name": "a"}] if nxt == 0 else {}) if isinstance(node, dict) else node[part]
        node[path[-1]] = value
    lines: list[str] = []
    where: dict[tuple, int] = {}

    def emit(node: Any, indent: str, path: tuple, first_prefix: str | None = None) -> None:
        for i, (key, value) in enumerate(node.items()):
            lead = first_prefix if (first_prefix is not None and i == 0) else indent
            if isinstance(value, dict):
                lines.append(f"{lead}{key}:")
                emit(value, indent + "  ", (*path, key))
            elif isinstance(value, list):
                lines.append(f"{lead}{key}:")
                emit(value[0], indent + "    ", (*path, key, 0), first_prefix=indent + "  - ")
            else:
                text = ".inf" if value == float("inf") else repr(value) if not isinstance(value, str) else value
                lines.append(f"{lead}{key}: {text}")
                where[(*path, key)] = len(lines)

    emit(tree, "", ())
    return "\n".join(lines) + "\n", where


def test_every_numeric_setting_has_an_upper_bound_and_floats_are_finite():
    assert len(FIELDS) > 40  # rules, overrides, retention, delivery, bus, spark, probe
    unbounded = [_dotted(path) for path, info in FIELDS if _bound(info, _kind(info))[1] is None]
    assert unbounded == []
    infinite = [_dotted(path) for path, info in FIELDS
                if _kind(info) is float and not any(getattr(m, "allow_inf_nan", None) is False for m in info.metadata)]
    assert infinite == []


def _too_big() -> dict[tuple, Any]:
    values: dict[tuple, Any] = {}
    for path, info in FIELDS:
        high = _bound(info, _kind(info))[1]
        values[path] = float("inf") if _kind(info) is float else int(high) + 1
    values[("rules", "state_ttl_ms")] = 2**63 - 1  # the value: near 2**63
    return values


@pytest.mark.parametrize(("path", "value"), [(("store", "retention", "history_days"), float("inf")),
                                              (("rules", "state_ttl_ms"), 2**63 - 1),
                                              (("rules", "state_ttl_ms"), MAX_STATE_TTL_MS + 1),
                                              (("clusters", 0, "rules", "session_timeout_ms"), MAX_DURATION_MS + 1)])
def test_a_value_past_its_bound_names_file_line_and_key(tmp_path, path, value):
    text, where = _yaml({path: value})
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert str(info.value).startswith(f"{config}:{where[path]}: {_dotted(path)}: "), str(info.value)
    assert "\n" not in str(info.value)


def test_every_value_at_its_bound_is_taken(tmp_path):
    values = {path: _bound(info, _kind(info))[1] for path, info in FIELDS}
    values = {path: (float(v) if _kind(info) is float else int(v))
              for (path, info), v in zip(FIELDS, values.values(), strict=True)}
    text, _ = _yaml(values)
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(text)
    loaded = load_config(config)
    assert loaded.rules.state_ttl_ms == MAX_STATE_TTL_MS and loaded.store.retention.history_days == 3650


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streaming.cli", *args], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, env={**os.environ, "PYSPARK_PYTHON": sys.executable})


@pytest.mark.integration
def test_check_config_and_run_refuse_every_value_past_its_bound_with_its_line(tmp_path):
    values = _too_big()
    text, where = _yaml(values)
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(text)

    checked = _cli("check-config", str(config))
    assert checked.returncode == 2, checked.stdout + checked.stderr
    reported = checked.stdout.strip().splitlines()
    assert reported[-1] == f"{config}: {len(values)} problems"
    for path in values:
        dotted = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(path))
        expected = f"{config}:{where[path]}: error: {dotted}: "
        assert any(line.startswith(expected) for line in reported), (expected, reported)

    run = _cli("run", "--config", str(config))
    assert run.returncode == 2, run.stderr[-2000:]
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith(f"fleetwatch run: {config}:")
    for path in values:
        assert f"{config}:{where[path]}: {_dotted(path)}: " in line, (_dotted(path), line)
    assert Path(tmp_path / "checkpoint").exists() is False


@pytest.mark.parametrize(("yaml_text", "said"), [
    ("rules:\n  stall_after_ms: 500\n",
     "rules.stall_after_ms: Value error, must be 0 (off) or at least 1000: a healthy broker fetches every 500 ms"),
    ("probe:\n  quorum_interval_ms: 50\n", "probe.quorum_interval_ms: Value error, must be 0 (off) or at least 100"),
])
def test_a_setting_that_is_off_or_at_least_a_minimum_refuses_what_is_between(tmp_path, yaml_text, said):
    path = tmp_path / "fleetwatch.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert str(refused.value) == f"{path}:2: {said}"
    key, value = yaml_text.split("\n")[1].strip().split(": ")
    path.write_text(yaml_text.replace(value, "0"))
    assert load_config(path).model_dump()[yaml_text.split(":")[0]][key] == 0
