"""Who may silence from the dashboard, and what a dashboard silence matches (issue 19).

- Basic auth is both variables or neither, per role: one without the other stops
  `fleetwatch dashboard` with a one-line error instead of serving without auth.
- Two roles (issue 27.1): a viewer sees every page but the silence callback refuses it (nothing
  written); a silencer may silence. Without auth nobody silences (issue 42.1): not under gunicorn,
  whatever its bind (a same-host proxy forwards every remote user to its loopback address; on a
  unix socket SERVER_NAME is the client's Host), and `fleetwatch dashboard` only with
  `--allow-local-silences` on loopback (the person at the machine).
- Without auth, a dashboard listening beyond loopback says so in a warning: at start when the
  command knows its address, at the first request under a WSGI server (gunicorn's bind).
- With auth, a silence records the authenticated user; without the right credentials, the
  silence callback is refused like every other request.
- Host and Origin (issue 27.2): a request whose Host is not the dashboard's (DNS rebinding of a
  loopback dashboard) is refused, and so is a silence posted from another origin; a real browser
  on the dashboard still silences.
- A silence from a misrouted endpoint's alert keeps the endpoint: the cluster's other misroutes
  still page.
Real processes where the finding is about them (the CLI's exit code and its stderr), Dash's own
WSGI app otherwise; a real SQLite store throughout.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select
from support.dashboard_fleet import PAY, T0, alert, fill_fleet

from dashboard.app import create_app
from dashboard.cli import command, configure_parser
from dashboard.page_content import PageContent
from streaming.config import ConfigError
from streaming.plumbing.ports import free_port
from streaming.records.alert import Alert
from streaming.store import Silence, Store, silences
from streaming.workshop.polling import poll

ROOT = Path(__file__).resolve().parents[2]
AUTH = ("FLEETWATCH_DASHBOARD_USER", "FLEETWATCH_DASHBOARD_PASSWORD")
SILENCER = ("FLEETWATCH_DASHBOARD_SILENCER_USER", "FLEETWATCH_DASHBOARD_SILENCER_PASSWORD")


def _dashboard(store_url: str, host: str, env: dict[str, str]) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if k not in (*AUTH, *SILENCER)}
    return subprocess.Popen([sys.executable, "-m", "streaming.cli", "dashboard", "--store-url", store_url,
                             "--host", host, "--port", str(free_port())],
                            cwd=ROOT, env={**clean, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _stderr_until(process: subprocess.Popen[str], marker: str, timeout_s: float = 60) -> list[str]:
    """The lines the dashboard wrote to stderr up to the one containing `marker` (then it is stopped)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        assert process.stderr is not None
        while time.monotonic() < deadline:
            line = process.stderr.readline()  # the dashboard writes its start line, then serves
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if marker in line:
                return lines
        raise AssertionError(f"no {marker!r} on stderr within {timeout_s:.0f} s: {lines}")
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store(url)
    fill_fleet(store)
    store.close()
    return url


@pytest.mark.integration
@pytest.mark.parametrize("only", (*AUTH, *SILENCER))
def test_one_auth_variable_without_the_other_is_a_one_line_error(store_url: str, only: str) -> None:
    process = _dashboard(store_url, "127.0.0.1", {only: "x"})
    _, err = process.communicate(timeout=60)
    pair = AUTH if only in AUTH else SILENCER
    missing = next(name for name in pair if name != only)
    assert process.returncode == 2
    assert err.count("\n") == 1 and missing in err and "needs both" in err, err


@pytest.mark.parametrize(("pair", "password"), [(AUTH, "change-me"), (SILENCER, "CHANGE-ME-too"),
                                              (SILENCER, " Change-me-later")])
def test_an_example_password_is_a_one_line_error_naming_the_variable(store_url: str, monkeypatch, capsys,
                                                                     pair: tuple[str, str], password: str) -> None:
    """The placeholders of deploy/systemd/*.env.example and deploy/k8s/secrets.env.example (issue 42.7)."""
    for name in (*AUTH, *SILENCER):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(pair[0], "sre")
    monkeypatch.setenv(pair[1], password)

    def served(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the dashboard was made with an example password")

    monkeypatch.setattr("dashboard.app.create_app", served)  # what `fleetwatch dashboard` would serve
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    assert command(parser.parse_args(["--store-url", store_url])) == 2
    err = capsys.readouterr().err
    assert err == (f"fleetwatch dashboard: {pair[1]} is still the placeholder of the shipped env examples: "
                   "set a secret of your own\n"), err
    assert password.strip().lower() not in err.lower()
    with pytest.raises(ConfigError, match=pair[1]):  # and under gunicorn: dashboard.wsgi does not import
        create_app(store_url)


@pytest.mark.integration
def test_no_auth_beyond_loopback_is_a_warning_at_start_and_loopback_is_quiet(store_url: str) -> None:
    exposed = _stderr_until(_dashboard(store_url, "0.0.0.0", {}), "dashboard on http://0.0.0.0")
    warnings = [json.loads(line) for line in exposed if line.startswith("{") and "auth is off" in line]
    assert len(warnings) == 1 and warnings[0]["level"] == "warning" and warnings[0]["host"] == "0.0.0.0"
    assert "FLEETWATCH_DASHBOARD_USER" in warnings[0]["msg"]

    quiet = _stderr_until(_dashboard(store_url, "127.0.0.1", {}), "dashboard on http://127.0.0.1")
    assert not [line for line in quiet if "auth is off" in line], quiet
    authenticated = _stderr_until(_dashboard(store_url, "0.0.0.0", {AUTH[0]: "sre", AUTH[1]: "s3cret"}),
                                  "dashboard on http://0.0.0.0")
    assert not [line for line in authenticated if "auth is off" in line], authenticated


def test_without_auth_the_first_request_on_a_public_address_warns_once(store_url: str, monkeypatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    for name in (*AUTH, *SILENCER):
        monkeypatch.delenv(name, raising=False)
    client = create_app(store_url).server.test_client()
    with caplog.at_level(logging.WARNING, logger="dashboard.auth"):
        for _ in range(3):  # gunicorn bound to 0.0.0.0: SERVER_NAME is its listening address
            assert client.get("http://0.0.0.0/").status_code == 200
    assert [r.getMessage() for r in caplog.records].count(
        "dashboard auth is off and it listens on 0.0.0.0: anyone who reaches it sees the fleet, and silencing "
        "is refused (set FLEETWATCH_DASHBOARD_USER/FLEETWATCH_DASHBOARD_PASSWORD for viewers and "
        "FLEETWATCH_DASHBOARD_SILENCER_USER/FLEETWATCH_DASHBOARD_SILENCER_PASSWORD for silencers)") == 1


def _silence_request(alert_id: str, reason: str) -> dict:
    """The body Dash's renderer posts when a silence button is clicked."""
    button = json.dumps({"alert": alert_id, "type": "silence"}, separators=(",", ":"))
    return {"output": "silence-result.children",
            "outputs": {"id": "silence-result", "property": "children"},
            "inputs": [[{"id": {"alert": alert_id, "type": "silence"}, "property": "n_clicks", "value": 1}]],
            "changedPropIds": [f"{button}.n_clicks"],
            "state": [{"id": "silence-reason", "property": "value", "value": reason}]}


def test_with_auth_a_silence_records_the_user_and_needs_the_credentials(store_url: str, monkeypatch) -> None:
    monkeypatch.delenv(AUTH[0], raising=False)
    monkeypatch.delenv(AUTH[1], raising=False)
    monkeypatch.setenv(SILENCER[0], "sre")  # the silencer alone: every request needs it
    monkeypatch.setenv(SILENCER[1], "s3cret")
    client = create_app(store_url).server.test_client()
    body = _silence_request("a-lost", "planned rolling restart")
    page = {"Origin": "http://localhost"}  # posted from the dashboard's own page
    assert client.post("/_dash-update-component", json=body, headers=page).status_code == 401
    wrong = base64.b64encode(b"sre:guess").decode()
    assert client.post("/_dash-update-component", json=body,
                       headers={**page, "Authorization": f"Basic {wrong}"}).status_code == 401
    store = Store(store_url)
    with store.engine.connect() as conn:
        assert conn.execute(select(silences)).all() == []
    right = base64.b64encode(b"sre:s3cret").decode()
    answer = client.post("/_dash-update-component", json=body, headers={**page, "Authorization": f"Basic {right}"})
    assert answer.status_code == 200, answer.text
    with store.engine.connect() as conn:
        [row] = conn.execute(select(silences)).mappings().all()
    assert (row["cluster"], row["rule"], row["broker_id"], row["created_by"]) == (
        PAY, "broker.heartbeat_lost", 3, "dashboard (sre)")
    store.close()


def _post_silence(client, alert_id: str, credentials: tuple[str, str] | None, base: str = "http://localhost"):
    """A silence click as the browser posts it, from the dashboard's own page (Origin), with
    `credentials` (user, password) or none."""
    headers = {"Origin": base}
    if credentials is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(credentials).encode()).decode()
    return client.post(f"{base}/_dash-update-component", json=_silence_request(alert_id, "planned restart"),
                       headers=headers)


def _silence_rows(store_url: str) -> list[dict]:
    store = Store(store_url)
    try:
        with store.engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(silences)).mappings().all()]
    finally:
        store.close()


def test_a_viewer_sees_everything_but_may_not_silence_and_a_silencer_may(store_url: str, monkeypatch) -> None:
    monkeypatch.setenv(AUTH[0], "sre")
    monkeypatch.setenv(AUTH[1], "s3cret")
    monkeypatch.setenv(SILENCER[0], "oncall")
    monkeypatch.setenv(SILENCER[1], "pager-pw")
    client = create_app(store_url).server.test_client()
    viewer = {"Authorization": "Basic " + base64.b64encode(b"sre:s3cret").decode()}
    for path in ("/", "/alerts", "/_dash-layout", "/_dash-dependencies"):
        assert client.get(path, headers=viewer).status_code == 200, path
    assert client.get("/alerts").status_code == 401

    refused = _post_silence(client, "a-lost", ("sre", "s3cret"))
    assert _silence_rows(store_url) == [], "a viewer's silence was written"
    assert refused.status_code == 403 or "may not silence" in refused.text, (refused.status_code, refused.text)
    # A silencer's password is not a viewer's: the wrong pairing is refused like a guess.
    assert _post_silence(client, "a-lost", ("oncall", "s3cret")).status_code == 401
    assert _silence_rows(store_url) == []

    answer = _post_silence(client, "a-lost", ("oncall", "pager-pw"))
    assert answer.status_code == 200, answer.text
    assert "Silence " in answer.text, answer.text
    [row] = _silence_rows(store_url)
    assert (row["rule"], row["broker_id"], row["created_by"]) == ("broker.heartbeat_lost", 3, "dashboard (oncall)")


def test_without_auth_only_a_loopback_dashboard_that_asks_may_silence(store_url: str, monkeypatch) -> None:
    for name in (*AUTH, *SILENCER):
        monkeypatch.delenv(name, raising=False)
    exposed = create_app(store_url, host="0.0.0.0").server.test_client()
    assert exposed.get("http://10.1.2.3:8050/alerts").status_code == 200  # it shows the fleet ...
    refused = _post_silence(exposed, "a-lost", None, base="http://10.1.2.3:8050")
    assert _silence_rows(store_url) == [], "a silence without auth beyond loopback was written"
    assert refused.status_code == 403 or "may not silence" in refused.text, (refused.status_code, refused.text)
    # ... and under gunicorn, where only the request tells the listening address (SERVER_NAME).
    gunicorn = create_app(store_url).server.test_client()
    refused = _post_silence(gunicorn, "a-lost", None, base="http://0.0.0.0:8050")
    assert _silence_rows(store_url) == []
    assert refused.status_code == 403 or "may not silence" in refused.text, (refused.status_code, refused.text)

    # On loopback too, unless asked: the address alone does not tell who is at the other end.
    loopback = create_app(store_url, host="127.0.0.1").server.test_client()
    refused = _post_silence(loopback, "a-lost", None, base="http://127.0.0.1:8050")
    assert _silence_rows(store_url) == [], "a silence without auth and without the opt-in was written"
    assert "may not silence" in refused.text, (refused.status_code, refused.text)
    # Asking is for a known loopback address only: not beyond it, not under a WSGI server.
    for host in ("0.0.0.0", "10.1.2.3", None):
        with pytest.raises(ConfigError, match="silences without credentials"):
            create_app(store_url, host=host, local_silences=True)

    asked = create_app(store_url, host="127.0.0.1", local_silences=True).server.test_client()
    answer = _post_silence(asked, "a-lost", None, base="http://127.0.0.1:8050")
    assert answer.status_code == 200 and "Silence " in answer.text, answer.text
    [row] = _silence_rows(store_url)
    assert row["created_by"] == "dashboard"


def test_allow_local_silences_beyond_loopback_is_a_one_line_error(store_url: str, capsys) -> None:
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    args = parser.parse_args(["--store-url", store_url, "--host", "0.0.0.0", "--allow-local-silences"])
    assert command(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fleetwatch dashboard: --allow-local-silences: "), err
    assert "0.0.0.0 is not a loopback address" in err, err


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix socket (gunicorn's `--bind unix:PATH`), as a same-host proxy speaks it."""

    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=30)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def _request(port: int | str, method: str, headers: dict[str, str], body: bytes | None = None) -> tuple[int, str]:
    """One request to 127.0.0.1:`port` (or the unix socket at the path `port`) with exactly these
    headers (Host included), as a rebinding page's or another site's browser would send it."""
    conn = (_UnixConnection(port) if isinstance(port, str) else
            http.client.HTTPConnection("127.0.0.1", port, timeout=30))
    try:
        conn.putrequest(method, "/" if method == "GET" else "/_dash-update-component",
                        skip_host=True, skip_accept_encoding=True)
        for name, value in {**headers, **({"Content-Type": "application/json",
                                           "Content-Length": str(len(body))} if body is not None else {})}.items():
            conn.putheader(name, value)
        conn.endheaders(body)
        answer = conn.getresponse()
        return answer.status, answer.read().decode(errors="replace")
    finally:
        conn.close()


@pytest.mark.integration
def test_a_loopback_dashboard_refuses_foreign_hosts_and_cross_origin_silences(store_url: str) -> None:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "streaming.cli", "dashboard", "--store-url", store_url,
                                "--host", "127.0.0.1", "--port", str(port), "--allow-local-silences"],
                               cwd=ROOT, env={k: v for k, v in os.environ.items() if k not in (*AUTH, *SILENCER)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    own = f"127.0.0.1:{port}"
    body = json.dumps(_silence_request("a-lost", "planned restart")).encode()
    try:
        def up() -> bool:
            try:
                return _request(port, "GET", {"Host": own})[0] == 200
            except OSError:
                return False

        poll(up, 90, "the dashboard to serve")
        assert _request(port, "GET", {"Host": f"localhost:{port}"})[0] == 200
        # DNS rebinding: evil.example resolves to 127.0.0.1; its page's requests carry its Host,
        # and its own origin, so only the Host tells.
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}"):
            status, text = _request(port, "GET", {"Host": host})
            assert status in (403, 421), (host, status, text[:200])
        rebound = _request(port, "POST", {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"},
                           body)
        assert rebound[0] in (403, 421), rebound
        # Another site posting to the dashboard's own address (CSRF): its Origin (or Referer) tells.
        for headers in ({"Origin": "http://evil.example"}, {"Referer": "http://evil.example/page"},
                        {"Origin": "null"}, {}):
            status, text = _request(port, "POST", {"Host": own, **headers}, body)
            assert _silence_rows(store_url) == [], (headers, status, text[:200])
            assert status == 403, (headers, status, text[:200])
        # The dashboard's own page may (loopback, no auth, asked for: the person at the machine).
        status, text = _request(port, "POST", {"Host": own, "Origin": f"http://{own}"}, body)
        assert status == 200 and "Silence " in text, (status, text[:300])
        assert len(_silence_rows(store_url)) == 1
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def _serve(argv: list[str], store_url: str) -> subprocess.Popen[bytes]:
    """A dashboard process without auth over `store_url`: `argv` after the Python interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in (*AUTH, *SILENCER)}
    return subprocess.Popen([sys.executable, *argv], cwd=ROOT, env={**env, "FLEETWATCH_STORE_URL": store_url},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=30)


def _serving(address: int | str, host: str) -> Callable[[], bool]:
    def up() -> bool:
        try:
            return _request(address, "GET", {"Host": host})[0] == 200
        except OSError:
            return False

    return up


@pytest.mark.integration
def test_gunicorn_without_auth_refuses_a_silence_from_loopback(store_url: str) -> None:
    """The shipped unit's bind (127.0.0.1, where a same-host proxy forwards every remote user) and a
    unix socket (SERVER_NAME is then the client's Host): a silence posted as from the machine
    itself, Host and Origin 127.0.0.1, is refused and nothing is written."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="fw-dash-") as folder:  # a unix socket path has ~100 bytes
        sock = str(Path(folder) / "dashboard.sock")
        process = _serve(["-m", "gunicorn", "--workers=1", f"--bind=127.0.0.1:{port}", f"--bind=unix:{sock}",
                          "--graceful-timeout=5", "dashboard.wsgi:server"], store_url)
        body = json.dumps(_silence_request("a-lost", "planned restart")).encode()
        answers = {}
        try:
            for bind, address, own in (("tcp", port, f"127.0.0.1:{port}"), ("unix", sock, "127.0.0.1:8050")):
                poll(_serving(address, own), 90, f"gunicorn to serve on {address}")
                status, text = _request(address, "POST", {"Host": own, "Origin": f"http://{own}"}, body)
                answers[bind] = (status, "may not silence" in text, len(_silence_rows(store_url)), text[:200])
        finally:
            _stop(process)
    assert [(bind, status, refused, rows) for bind, (status, refused, rows, _) in answers.items()] == [
        ("tcp", 200, True, 0), ("unix", 200, True, 0)], answers


@pytest.mark.integration
def test_fleetwatch_dashboard_without_the_opt_in_refuses_a_silence_from_loopback(store_url: str) -> None:
    port = free_port()
    process = _serve(["-m", "streaming.cli", "dashboard", "--store-url", store_url, "--port", str(port)], store_url)
    own = f"127.0.0.1:{port}"
    try:
        poll(_serving(port, own), 90, "the dashboard to serve")
        status, text = _request(port, "POST", {"Host": own, "Origin": f"http://{own}"},
                                json.dumps(_silence_request("a-lost", "planned restart")).encode())
        assert _silence_rows(store_url) == [], (status, text[:300])
        assert status == 200 and "may not silence" in text, (status, text[:300])
    finally:
        _stop(process)


def test_allowed_hosts_are_configurable(store_url: str, monkeypatch) -> None:
    for name in (*AUTH, *SILENCER):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FLEETWATCH_DASHBOARD_ALLOWED_HOSTS", "fleet.example.com, .ops.example")
    client = create_app(store_url, host="0.0.0.0").server.test_client()
    assert client.get("http://fleet.example.com/").status_code == 200
    assert client.get("http://dash.ops.example:8443/").status_code == 200
    assert client.get("http://evil.example/").status_code in (403, 421)
    assert client.get("http://10.1.2.3:8050/").status_code in (403, 421)


@pytest.mark.browser
def test_a_browser_on_the_dashboard_still_silences(dash_duo, store_url: str, monkeypatch) -> None:
    for name in (*AUTH, *SILENCER):
        monkeypatch.delenv(name, raising=False)
    # On 127.0.0.1, opened as localhost; no auth: the person at the machine, who asked to silence.
    dash_duo.start_server(create_app(store_url, refresh_ms=60_000, host="127.0.0.1", local_silences=True))
    dash_duo.wait_for_page(f"{dash_duo.server_url}/alerts")
    dash_duo.wait_for_element(".silence-btn")
    dash_duo.find_element("#silence-reason").send_keys("planned rolling restart")
    button = json.dumps({"alert": "a-lost", "type": "silence"}, separators=(",", ":"))
    dash_duo.find_element(f"[id='{button}']").click()
    dash_duo.wait_for_contains_text("#silence-result", "Silence ")
    [row] = poll(lambda: _silence_rows(store_url), 30, "the silence to be stored")
    assert (row["rule"], row["reason"], row["created_by"]) == ("broker.heartbeat_lost", "planned rolling restart",
                                                               "dashboard")
    assert [e for e in dash_duo.get_logs() if e.get("level") == "SEVERE"] == []


def test_a_silence_of_one_misrouted_endpoint_keeps_the_endpoint(store_url: str) -> None:
    store = Store(store_url)
    misroutes = [alert(f"m{i}", "connection.misrouted", "critical", PAY, "payments-eu1",
                        endpoint=f"b{i}.pay:9092", summary="reaches another cluster") for i in (1, 2)]
    store.record_alerts(map(Alert.from_dict, misroutes))
    answer = PageContent(store, lambda path: path, None).silence("m1", "b1 is being rescheduled", "dashboard")
    assert answer.startswith("Silence "), answer
    with store.engine.connect() as conn:
        [row] = conn.execute(select(silences)).mappings().all()
    silence = Silence.from_row(row)
    assert silence.endpoint == "b1.pay:9092"
    assert silence.matches(misroutes[0]) and not silence.matches(misroutes[1])
    assert silence.active_at(silence.starts_at) and silence.starts_at > T0
    store.close()
