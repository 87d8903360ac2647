"""`fleetwatch replay EVENTS --what-if KEY=VALUE`: would other rule settings have paged us?

The file is replayed twice through the product's replay (`streaming.job.replay_file`, the Spark
job that `fleetwatch replay` runs, so "today" is exactly `fleetwatch replay`'s alert lines): once
with the config's rules, once with the changed ones. The alert lines of each become incidents
(a firing line and its resolved line, by `alert_id`), and the incidents of one rule and subject
are paired across the two runs when their spans overlap: a pair whose start or end differs has
moved, an incident of today without a partner was removed, one of the change without a partner
was added. The report is Markdown, to paste into a postmortem.

Keys are the config's own (`rules.KEY`, `clusters[NAME].rules.KEY`), validated with its bounds;
a bad one is a one-line ConfigError (exit 2).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from streaming.config import FleetwatchConfig
from streaming.plumbing.errors import ConfigError

__all__ = ["Change", "Comparison", "Incident", "apply_what_if", "compare", "render", "what_if"]

_KEY = re.compile(r"^(?:clusters\[(?P<cluster>[^\]]+)\]\.)?rules\.(?P<rule_key>[a-z_]+)$")
_SUBJECT = ("cluster_id", "target", "broker_id", "endpoint")
_FOREVER = 2**63  # an incident still open at the end of the file spans to here, for the overlap test


def apply_what_if(config: FleetwatchConfig, changes: Sequence[str]) -> FleetwatchConfig:
    """`config` with each `KEY=VALUE` applied and the whole validated again, with its bounds.

    A value is read as YAML (`12000`, `0.5`, `null`), as it would be written in the file; a
    cluster that the config does not name is added with these rules only (its rules apply to the
    target of that name)."""
    raw = config.model_dump()
    for change in changes:
        key, sep, text = change.partition("=")
        match = _KEY.match(key.strip())
        if not sep or match is None:
            raise ConfigError(f"--what-if {change!r}: expected rules.KEY=VALUE or clusters[NAME].rules.KEY=VALUE")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ConfigError(f"--what-if {change!r}: the value is not valid YAML") from None
        rules = raw["rules"]
        if match["cluster"] is not None:
            cluster = next((c for c in raw["clusters"] if c["name"] == match["cluster"]), None)
            if cluster is None:
                cluster = {"name": match["cluster"], "rules": {}}
                raw["clusters"].append(cluster)
            rules = cluster["rules"]
        rules[match["rule_key"]] = value
    try:
        return FleetwatchConfig.model_validate(raw)
    except ValidationError as exc:
        problems = [f"{_where(err['loc'], raw)}: {'unknown key' if err['type'] == 'extra_forbidden' else err['msg']}"
                    for err in exc.errors()]
        raise ConfigError(f"--what-if: {'; '.join(problems)}") from None


def _where(loc: Sequence[Any], raw: dict[str, Any]) -> str:
    """A pydantic location in the spelling of `--what-if` (a cluster by name, not by index)."""
    parts = list(loc)
    if len(parts) >= 2 and parts[0] == "clusters" and isinstance(parts[1], int):
        parts[:2] = [f"clusters[{raw['clusters'][parts[1]]['name']}]"]
    return ".".join(str(p) for p in parts) or "(top level)"


@dataclass(frozen=True)
class Incident:
    """One alert of a replay, from its firing line to its resolved line (`ends_at` None: open at the end)."""

    rule: str
    subject: tuple[Any, ...]  # cluster_id, target, broker_id, endpoint
    starts_at: int
    ends_at: int | None

    def overlaps(self, other: Incident) -> bool:
        return (self.starts_at <= (other.ends_at or _FOREVER)
                and other.starts_at <= (self.ends_at or _FOREVER))

    def name(self) -> str:
        cluster, target, broker, endpoint = self.subject
        parts = [f"cluster {cluster}" if cluster else None, f"target {target}" if target else None,
                 f"broker {broker}" if broker is not None else None, f"endpoint {endpoint}" if endpoint else None]
        return ", ".join(p for p in parts if p)


@dataclass(frozen=True)
class Change:
    """One incident that differs: `today` None is added, `changed` None is removed, both is moved."""

    today: Incident | None
    changed: Incident | None

    @property
    def either(self) -> Incident:
        found = self.today or self.changed
        assert found is not None  # a change has one side at least
        return found

    @property
    def rule(self) -> str:
        return self.either.rule

    @property
    def kind(self) -> str:
        return "added" if self.today is None else "removed" if self.changed is None else "moved"


@dataclass(frozen=True)
class Comparison:
    changes: tuple[Change, ...]
    unchanged: dict[str, int]  # rule -> incidents identical in both runs

    def of_kind(self, kind: str) -> list[Change]:
        return [c for c in self.changes if c.kind == kind]


def incidents(alerts: Iterable[dict[str, Any]]) -> list[Incident]:
    """The incidents of a replay's alert lines: each `alert_id`'s last line wins (resolved after firing)."""
    last: dict[str, dict[str, Any]] = {}
    for line in alerts:
        last[line["alert_id"]] = line
    return sorted((Incident(a["rule"], tuple(a[k] for k in _SUBJECT), a["starts_at"],
                            a["ends_at"] if a["status"] == "resolved" else None) for a in last.values()),
                  key=_order)


def _order(incident: Incident) -> tuple[Any, ...]:
    return (incident.starts_at, incident.rule, tuple(str(part) for part in incident.subject))


def compare(today: Iterable[dict[str, Any]], changed: Iterable[dict[str, Any]]) -> Comparison:
    """Pair the incidents of two replays per rule and subject, in start order, where their spans overlap."""
    sides: dict[tuple[str, tuple[Any, ...]], tuple[list[Incident], list[Incident]]] = defaultdict(lambda: ([], []))
    for side, lines in enumerate((today, changed)):
        for incident in incidents(lines):
            sides[(incident.rule, incident.subject)][side].append(incident)
    changes: list[Change] = []
    unchanged: dict[str, int] = defaultdict(int)
    for (rule, _), (before, after) in sides.items():
        i = j = 0
        while i < len(before) or j < len(after):
            a, b = before[i] if i < len(before) else None, after[j] if j < len(after) else None
            if a is not None and b is not None and a.overlaps(b):
                if a == b:
                    unchanged[rule] += 1
                else:
                    changes.append(Change(a, b))
                i, j = i + 1, j + 1
            elif b is None or (a is not None and a.starts_at <= b.starts_at):
                changes.append(Change(a, None))
                i += 1
            else:
                changes.append(Change(None, b))
                j += 1
    changes.sort(key=lambda c: (c.rule, _order(c.either)))
    return Comparison(tuple(changes), dict(unchanged))


def _at(ms: int | None, origin: int) -> str:
    return "open at the end" if ms is None else f"+{(ms - origin) / 1000:.1f} s"


def _delta(before: int | None, after: int | None) -> str:
    if before == after:
        return "same"
    if before is None or after is None:
        return "now open at the end" if after is None else "now ends"
    return f"{(after - before) / 1000:+.1f} s"


def _setting(config: FleetwatchConfig, key: str) -> Any:
    """The value of a `--what-if` key in `config` (a cluster's override, else the global rule)."""
    match = _KEY.match(key)
    assert match is not None  # keys were validated by apply_what_if
    cluster = next((c for c in config.clusters if c.name == match["cluster"]), None)
    override = getattr(cluster.rules, match["rule_key"]) if cluster is not None else None
    return override if override is not None else getattr(config.rules, match["rule_key"])


def render(events: str, settings: Sequence[str], comparison: Comparison, origin: int) -> str:
    """The Markdown report: a summary, then per rule each incident added, removed and moved.
    Times are seconds from `origin` (the file's first event), so the report reads without a clock."""
    added, removed, moved = (comparison.of_kind(k) for k in ("added", "removed", "moved"))
    out = [f"### What-if replay of `{events}`", "",
           f"Changed: {', '.join(settings)}. Times are seconds after the file's first event.", "",
           f"**Summary:** {len(removed)} alert(s) would not have fired, {len(added)} more would have, "
           f"{len(moved)} would have moved; {sum(comparison.unchanged.values())} unchanged.", ""]
    if comparison.changes:
        out += ["| rule | change | subject | today | with the change | starts_at Δ | ends_at Δ |",
                "|---|---|---|---|---|---|---|"]
    def span(incident: Incident | None) -> str:
        return "—" if incident is None else f"{_at(incident.starts_at, origin)} → {_at(incident.ends_at, origin)}"

    for c in comparison.changes:
        today, changed = c.today, c.changed
        deltas = (_delta(today.starts_at, changed.starts_at), _delta(today.ends_at, changed.ends_at)) \
            if today is not None and changed is not None else ("—", "—")
        out.append(f"| {c.rule} | {c.kind} | {c.either.name()} | {span(today)} | {span(changed)} | "
                   f"{deltas[0]} | {deltas[1]} |")
    rules = sorted({c.rule for c in comparison.changes} | set(comparison.unchanged))
    if rules:
        out += ["", "Per rule: " + "; ".join(
            f"{rule}: {sum(1 for c in added if c.rule == rule)} added, "
            f"{sum(1 for c in removed if c.rule == rule)} removed, {sum(1 for c in moved if c.rule == rule)} moved, "
            f"{comparison.unchanged.get(rule, 0)} unchanged" for rule in rules)]
    return "\n".join(out)


Replayer = Callable[[Path, Path | None, FleetwatchConfig], list[dict[str, Any]]]


def what_if(events: Path, config: FleetwatchConfig, settings: Sequence[str], replay: Replayer,
            alerts_out: Path | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """Today's alert lines, the changed rules' alert lines and the report. `replay(events, out, config)`
    is the product's replay (the CLI passes `replay_file`'s); today's lines go to `alerts_out`."""
    changed_config = apply_what_if(config, settings)  # a bad key is told before any replay starts
    today = replay(events, alerts_out, config)
    changed = replay(events, None, changed_config)
    said = [f"`{key}` {_setting(config, key)} → {_setting(changed_config, key)}"
            for key in dict.fromkeys(s.partition("=")[0].strip() for s in settings)]
    return today, changed, render(events.name, said, compare(today, changed), _first_ts(events))


def _first_ts(events: Path) -> int:
    """The event time of the file's first line that has one (the report's time origin)."""
    with events.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                ts = json.loads(line).get("ts")
            except (ValueError, AttributeError):
                continue
            if isinstance(ts, int):
                return ts
    return 0
