"""`fleetwatch check-config`: validate config files before they are deployed.

The same validation as every command (`streaming.config`), but each problem on its own line,
compiler style, with the file, the line and the path of the setting:

    conf/prod.yaml:12: error: clusters[0].rules.session_timeout_ms: Input should be greater than 0

plus checks that only matter when deploying: the store URL and its driver, `host:port`
addresses, the Spark master, what each receiver needs; `--env` checks that the environment
variables the config names are set, `--connect` that the store and the bus answer.
Exit 0 when every file is fine (warnings allowed unless `--strict`), 2 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import TypeAdapter, ValidationError
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from streaming.config import FleetwatchConfig, Receiver, yaml_line
from streaming.plumbing.errors import first_line

__all__ = ["Problem", "check_file", "command", "configure_parser"]

_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|spark://[^/\s]+|yarn|k8s://\S+)$")
_PATH_IN_MESSAGE = re.compile(r"^([A-Za-z_]\w*(?:\[\d+\])?(?:\.[A-Za-z_]\w*(?:\[\d+\])?)*) (.+)$")


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    path: str
    message: str
    severity: str = "error"  # or "warning"

    def render(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        path = f"{self.path}: " if self.path else ""
        return f"{where}: {self.severity}: {path}{self.message}"


def _dotted(loc: tuple[Any, ...] | list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _parse_path(path: str) -> list[Any]:
    parts: list[Any] = []
    for name, index in re.findall(r"([A-Za-z_]\w*)|\[(\d+)\]", path):
        parts.append(int(index) if index else name)
    return parts


def _line_of(root: yaml.Node | None, loc: list[Any]) -> int | None:
    """1-based line of the deepest node of `loc` present in the YAML tree; the document's own line
    for a problem of the whole file or of a key it does not have."""
    return yaml_line(root, loc) or (root.start_mark.line + 1 if root is not None else None)


def _host_port(value: str) -> str | None:
    """None when `value` is host:port (IPv6 in brackets), else what is wrong."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host:
        return f"{value!r} is not host:port"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return f"{value!r} has no valid port"
    return None


def _schema_problems(raw: dict[str, Any], file: str, root: yaml.Node | None) -> list[Problem]:
    try:
        FleetwatchConfig.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = list(err["loc"])
            message = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            message = message.removeprefix("Value error, ")
            # Model-level checks name the path in their message: "routes[0].receiver 'x' is ...".
            found = _PATH_IN_MESSAGE.match(message) if err["type"] == "value_error" else None
            if found and any(c in found.group(1) for c in "[."):
                loc = [*loc, *_parse_path(found.group(1))]
                message = found.group(2)
            problems.append(Problem(file, _line_of(root, loc), _dotted(loc) or "(top level)", message))
        return problems
    return []


def _job_checkpoint(config: SimpleNamespace) -> str | None:
    """The checkpoint URL the job would write, when it is not the configured URL's path with the
    query's name under it: the job joins the name to the URL as text, so a URL with a query or a
    fragment (`s3a://b/ck?versionId=3`) gets the name inside them, and Hadoop takes the whole as a path."""
    from streaming.job import QUERY_NAME, checkpoint_path

    used = checkpoint_path(FleetwatchConfig.model_construct(spark=config.spark), QUERY_NAME)
    meant, got = urlsplit(config.spark.checkpoint_dir), urlsplit(used)
    wanted = (meant.scheme, meant.netloc, f"{meant.path.rstrip('/')}/{QUERY_NAME}", "", "")
    return None if got == wanted else used


def _deploy_problems(config: SimpleNamespace, file: str, root: yaml.Node | None, *, check_env: bool,
                     connect: bool) -> list[Problem]:
    """Checks that matter when deploying, on every section that passed the schema."""
    problems: list[Problem] = []

    def add(path: str, message: str, severity: str = "error") -> None:
        problems.append(Problem(file, _line_of(root, _parse_path(path)), path, message, severity))

    url = _store_url_problems(config.store.url, add) if config.store is not None else None
    master = config.spark.master if config.spark is not None else "local[*]"
    local = master.startswith("local")
    if not _MASTER.match(master):
        add("spark.master", f"{master!r} is not a Spark master: local[*], spark://host:port, yarn or k8s://...")
    if config.bus is not None and config.bus.bootstrap_servers is None and not local:
        add("bus.bootstrap_servers", "not set: the job would start an embedded broker on the driver, "
                                     "which no collector reaches", "warning")
    if config.bus is not None and config.bus.bootstrap_servers is not None:
        for server in config.bus.bootstrap_servers.split(","):
            if (wrong := _host_port(server)) is not None:
                add("bus.bootstrap_servers", wrong)
    if not local and url is not None and url.get_backend_name() == "sqlite" and not master.startswith("spark://"):
        add("store.url", "SQLite is a single-host store: use PostgreSQL with a cluster master", "warning")
    checkpoint = config.spark.checkpoint_dir if config.spark is not None else ""
    if not local and checkpoint and not Path(checkpoint).is_absolute() and "://" not in checkpoint:
        add("spark.checkpoint_dir", "relative path with a cluster master: use a path every node shares "
                                    "(a shared volume, hdfs://, s3a://)", "warning")
    if "://" in checkpoint and (used := _job_checkpoint(config)) is not None:
            add("spark.checkpoint_dir", f"this version of the job turns the URL into {used!r}: "
                                        "use a path every node shares (a mounted volume)")

    rules = config.rules
    if rules is not None and rules.max_source_lead_ms >= rules.allowed_lateness_ms:
        add("rules.max_source_lead_ms", f"{rules.max_source_lead_ms} is not under rules.allowed_lateness_ms "
            f"({rules.allowed_lateness_ms}): a collector whose clock runs that far ahead moves the watermark past "
            "the other collectors' events, which then arrive late (streaming/detect/README.md, \"Input bounds\")",
            "warning")

    if rules is not None:
        _stall_problems(rules, config.clusters or [], config.probe, add)

    for i, cluster in enumerate(config.clusters or []):
        if not cluster.bootstrap:
            add(f"clusters[{i}].bootstrap", "empty: the probe has no address to poll", "warning")
        for j, address in enumerate(cluster.bootstrap):
            if (wrong := _host_port(address)) is not None:
                add(f"clusters[{i}].bootstrap[{j}]", wrong)
        security = cluster.security
        if security.protocol.startswith("SASL") and not (security.username_env and security.password_env):
            add(f"clusters[{i}].security", f"{security.protocol} needs username_env and password_env")
        if security.protocol.startswith("SASL") and security.sasl_mechanism == "PLAIN":
            # Kafka runs the KIP-1242 identity check only after authentication: the probe cannot
            # tell a misrouted address before it has sent the password to it.
            add(f"clusters[{i}].security.sasl_mechanism", "PLAIN hands the password to whichever broker answers "
                "at an address, a misrouted one of another cluster too (Kafka checks the identity only after "
                "authentication): use SCRAM-SHA-512", "warning")

    seen: dict[str, int] = {}
    for i, receiver in enumerate(config.receivers or []):
        if receiver.name in seen:
            add(f"alerting.receivers[{i}].name", f"{receiver.name!r} is also receivers[{seen[receiver.name]}]")
        seen.setdefault(receiver.name, i)
        if receiver.type == "pagerduty":
            if not receiver.routing_key_env:
                add(f"alerting.receivers[{i}]", "a pagerduty receiver needs routing_key_env")
        elif not (receiver.url or receiver.url_env):
            add(f"alerting.receivers[{i}]", f"a {receiver.type} receiver needs url or url_env")

    if check_env:
        for path, name in _env_names(config):
            if not os.environ.get(name):
                add(path, f"environment variable {name} is not set")
    if connect:
        problems += _connect_problems(config, file, root)
    return problems


def _stall_problems(rules: Any, clusters: list[Any], probe: Any, add: Callable[..., None]) -> None:
    """broker.stalled (issue 44) needs the probe's quorum readings, and a fetch age well under the session."""
    if rules.stall_after_ms and probe is not None and not probe.quorum_interval_ms:
        add("probe.quorum_interval_ms", "0: no quorum reading, so rules.stall_after_ms warns of nothing and a "
            "broker's page waits for its session's deadline (streaming/detect/README.md, \"Before Kafka knows\")",
            "warning")
    settings = [("rules", rules.stall_after_ms, rules.session_timeout_ms)]
    settings += [(f"clusters[{i}].rules", c.rules.stall_after_ms if c.rules.stall_after_ms is not None
                  else rules.stall_after_ms, c.rules.session_timeout_ms or rules.session_timeout_ms)
                 for i, c in enumerate(clusters)]
    for where, stall, session in settings:
        if stall and stall >= session:
            add(f"{where}.stall_after_ms", f"{stall} is not under the session ({session} ms): broker.stalled would "
                "come no earlier than broker.heartbeat_lost", "warning")


def _store_url_problems(text: str, add: Callable[..., None]) -> URL | None:
    """A URL SQLAlchemy understands, a database fleetwatch supports, its driver installed."""
    try:
        url = make_url(text)
    except ArgumentError:
        add("store.url", "not a database URL (sqlite:///path or postgresql+psycopg://user@host/db)")
        return None
    if url.get_backend_name() not in ("sqlite", "postgresql"):
        add("store.url", f"unsupported database {url.get_backend_name()!r}: use sqlite or postgresql")
        return url
    try:
        url.get_dialect().import_dbapi()
    except (ImportError, NoSuchModuleError):
        add("store.url", f"driver {url.get_driver_name()!r} is not installed: use postgresql+psycopg://user@host/db")
    if url.password:
        add("store.url", "holds a password: leave it out and set PGPASSWORD (e.g. from a Secret)", "warning")
    return url


def _env_names(config: SimpleNamespace) -> list[tuple[str, str]]:
    names = []
    for i, cluster in enumerate(config.clusters or []):
        for key in ("username_env", "password_env"):
            if value := getattr(cluster.security, key):
                names.append((f"clusters[{i}].security.{key}", value))
    for i, receiver in enumerate(config.receivers or []):
        for key in ("url_env", "secret_env", "routing_key_env"):
            if value := getattr(receiver, key):
                names.append((f"alerting.receivers[{i}].{key}", value))
    return names


def _connect_problems(config: SimpleNamespace, file: str, root: yaml.Node | None) -> list[Problem]:
    problems: list[Problem] = []
    if config.store is None:
        return problems
    try:
        engine = create_engine(config.store.url)
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        finally:
            engine.dispose()
    except Exception as exc:  # any driver or network failure is the answer
        # The first line only: never the URL, which may hold a password.
        problems.append(Problem(file, _line_of(root, ["store", "url"]), "store.url",
                                f"cannot connect: {first_line(exc, named=True)}"))
    for server in ((config.bus.bootstrap_servers if config.bus else None) or "").split(","):
        if not server or _host_port(server) is not None:
            continue
        host, _, port = server.strip().rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
        except OSError as exc:
            problems.append(Problem(file, _line_of(root, ["bus", "bootstrap_servers"]), "bus.bootstrap_servers",
                                    f"cannot connect to {server.strip()}: {exc.strerror or exc}"))
    return problems


def check_file(path: str | Path, *, check_env: bool = False, connect: bool = False) -> list[Problem]:
    """Every problem of one config file (errors and warnings); [] when it is fine."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        return [Problem(file, None, "", f"cannot read: {exc.strerror}")]
    except UnicodeDecodeError:
        return [Problem(file, None, "", "not UTF-8 text")]
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "syntax error"
        return [Problem(file, mark.line + 1 if mark else None, "", f"not valid YAML: {problem}")]
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return [Problem(file, _line_of(root, []), "(top level)", "must be a mapping")]
    problems = _schema_problems(raw, file, root)
    return problems + _deploy_problems(_sections(raw), file, root, check_env=check_env, connect=connect)


def _sections(raw: dict[str, Any]) -> SimpleNamespace:
    """Each top-level section validated on its own (None when it has errors), so that the
    deployment checks still run on the sound sections of a config with schema errors."""
    out: dict[str, Any] = {}
    for name, info in FleetwatchConfig.model_fields.items():
        try:
            out[name] = (TypeAdapter(info.annotation).validate_python(raw[name]) if name in raw
                         else info.get_default(call_default_factory=True))
        except ValidationError:
            out[name] = None
    # Receivers on their own too: a route naming an unknown receiver fails the whole section.
    alerting = raw.get("alerting")
    try:
        receivers = alerting.get("receivers", []) if isinstance(alerting, dict) else []
        out["receivers"] = TypeAdapter(list[Receiver]).validate_python(receivers or [])
    except ValidationError:
        out["receivers"] = None
    return SimpleNamespace(**out)


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="*", metavar="FILE", help="config files to check")
    p.add_argument("--config", action="append", default=[], metavar="FILE",
                   help="a config file to check (repeatable; same as a FILE argument)")
    p.add_argument("--env", action="store_true",
                   help="also check that the environment variables the config names (*_env) are set")
    p.add_argument("--connect", action="store_true", help="also connect to the store and the bus")
    p.add_argument("--strict", action="store_true", help="warnings are problems too (exit 2)")


def command(args: argparse.Namespace) -> int:
    files = [*args.config, *args.files]
    if not files:
        print("fleetwatch check-config: name at least one config file (--config FILE)", file=sys.stderr)
        return 2
    failed = False
    for file in files:
        problems = check_file(file, check_env=args.env, connect=args.connect)
        errors = [p for p in problems if p.severity == "error" or args.strict]
        for problem in problems:
            print(problem.render())
        if errors:
            failed = True
            print(f"{file}: {len(errors)} problem{'s' if len(errors) != 1 else ''}")
        else:
            warned = f" ({len(problems)} warning{'s' if len(problems) != 1 else ''})" if problems else ""
            print(f"{file}: OK{warned}")
    return 2 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """`python -m streaming.ops.check_config FILE...` (what `fleetwatch check-config` runs)."""
    parser = argparse.ArgumentParser(prog="fleetwatch check-config", description=__doc__.splitlines()[0])
    configure_parser(parser)
    return command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
