"""The runbooks (docs/runbooks/, shipped in the package as dashboard/runbooks/) as pages of the
dashboard: `/runbooks/<rule>` renders a rule's page, `/runbooks` lists them (issue 43).

Plain server-rendered HTML, no script: a page opened from a phone's notification reads at once, and
behind the dashboard's own auth and host checks like every other page (auth.guard_server). Raw HTML in
a runbook is not rendered (CommonMark with HTML off): a page can only say what its Markdown says.
"""

from __future__ import annotations

import html
from functools import cache
from pathlib import Path

import flask
from markdown_it import MarkdownIt

from dashboard.views.elements import Href

__all__ = ["RUNBOOKS", "register_runbooks", "runbook_page", "runbook_rules"]

RUNBOOKS = Path(__file__).resolve().parent / "runbooks"
_INDEX = "README"

_STYLE = """
body { font: 17px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1d2330; background: #fff; }
nav { background: #1d2330; padding: .6rem 1rem; }
nav a { color: #fff; margin-right: 1rem; text-decoration: none; }
main { max-width: 46rem; margin: 0 auto; padding: 1rem; }
h1 { font-size: 1.5rem; overflow-wrap: anywhere; } h2 { font-size: 1.2rem; margin-top: 1.6rem; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .9em; overflow-wrap: anywhere; }
pre { background: #f3f4f7; padding: .7rem; overflow-x: auto; white-space: pre-wrap; border-radius: 4px; }
a { color: #1a5fb4; } li { margin: .2rem 0; }
"""


@cache
def _markdown() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False}).enable("table")


def runbook_rules() -> list[str]:
    """The rules that have a runbook, in name order."""
    return sorted(p.stem for p in RUNBOOKS.glob("*.md") if p.stem != _INDEX)


def _page(title: str, body: str, href: Href) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)} · fleetwatch runbook</title><style>{_STYLE}</style></head>"
            f'<body><nav><a href="{href("/")}">fleetwatch</a><a href="{href("/alerts")}">Alerts</a>'
            f'<a href="{href("/runbooks")}">Runbooks</a></nav><main class="runbook">{body}</main></body></html>')


def runbook_page(rule: str, href: Href) -> str | None:
    """A rule's runbook as an HTML page; None when the rule has none."""
    if rule not in runbook_rules():
        return None  # never a path of the caller's: only the names listed above are read
    text = (RUNBOOKS / f"{rule}.md").read_text(encoding="utf-8")
    return _page(rule, _markdown().render(text), href)


def _index(href: Href) -> str:
    intro = (RUNBOOKS / f"{_INDEX}.md").read_text(encoding="utf-8")
    items = "".join(f'<li><a href="{href("/runbooks/" + rule)}"><code>{html.escape(rule)}</code></a></li>'
                    for rule in runbook_rules())
    return _page("Runbooks", _markdown().render(intro) + f'<ul class="runbooks">{items}</ul>', href)


def register_runbooks(server: flask.Flask, href: Href, prefix: str = "/") -> None:
    """Serve `/runbooks` and `/runbooks/<rule>` on the dashboard's server (under its path `prefix`)."""

    @server.route(f"{prefix}runbooks")
    def runbook_index() -> flask.Response:
        return flask.Response(_index(href), 200, {"Content-Type": "text/html; charset=utf-8"})

    @server.route(f"{prefix}runbooks/<rule>")
    def runbook(rule: str) -> flask.Response:
        page = runbook_page(rule, href)
        if page is None:
            return flask.Response(_page("Not found", f"<h1>No runbook for {html.escape(rule)}</h1>", href), 404,
                                  {"Content-Type": "text/html; charset=utf-8"})
        return flask.Response(page, 200, {"Content-Type": "text/html; charset=utf-8"})
