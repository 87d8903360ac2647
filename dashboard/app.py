"""The SRE dashboard: a Dash app over the store, one page per URL, refreshed by an interval.

Pages: `/` fleet overview (fleet map and table), `/cluster/<cluster_id>`, `/alerts`, `/deliveries`,
`/identity`, `/pipeline` (charts and tables), and the runbooks, `/runbooks/<rule>` (`runbooks`:
server-rendered Markdown, no script). Each page's skeleton is in `layouts`, what it shows
in `page_content` (from `queries` through `views`), and the callbacks that tie them in `callbacks`.

The alerts page silences a firing alert (its cluster, rule, broker and endpoint, 2 h, with a
reason) the way `fleetwatch silence add` does. Who may (`auth`): with basic auth on, only the
silencer (FLEETWATCH_DASHBOARD_SILENCER_USER/PASSWORD), whose name the silence records; the viewer
(FLEETWATCH_DASHBOARD_USER/PASSWORD) sees every page and is refused by the silence callback itself.
With auth off, nobody, unless `fleetwatch dashboard --allow-local-silences` on loopback (the person
at the machine; never under gunicorn); one listening beyond loopback says so in a warning. Whatever
the auth, a request whose Host is not an allowed host (loopback names on loopback;
FLEETWATCH_DASHBOARD_ALLOWED_HOSTS) or a POST from another origin gets 403 (`auth`: DNS rebinding,
cross-site requests).

Filters live in the URL's query string (`/alerts?rule=broker.fenced&severity=critical&cluster=pay`,
`/alerts?alert=<alert id>`, `/?env=prod&region=eu&q=pay&healthy=1&group=region`,
`/deliveries?receiver=ops&state=dead`): a page opened from a pasted link starts filtered, and
changing a filter rewrites the address in place (no history entry per keystroke).

The fleet map is sent to the browser only when it changed (the browser keeps the key of the map
it shows): at 1,000 clusters it is ~220 KB, and most refreshes change nothing on it.
"""

from __future__ import annotations

from collections.abc import Mapping

from dash import Dash

from dashboard.auth import guard_server
from dashboard.callbacks import register_callbacks
from dashboard.layouts import frame_layout, validation_layout
from dashboard.page_content import PageContent, Tags
from dashboard.runbooks import register_runbooks
from streaming.config import IncidentSettings
from streaming.store import Store

__all__ = ["create_app"]


def create_app(store_url: str, *, refresh_ms: int = 2000, tags: Tags | None = None,
               incidents: IncidentSettings | None = None, host: str | None = None,
               local_silences: bool = False, names: Mapping[str, str] | None = None) -> Dash:
    """The dashboard over the store at `store_url`, refreshing every `refresh_ms`.

    `tags` maps a target name to its tags (`{c.name: c.tags for c in config.clusters}`): the
    overview then has one filter per tag key. `incidents`: the config's grouping of fleet incidents
    (the defaults without one), as the notifier groups them. When a viewer or silencer credential is set
    (`auth`), every request needs HTTP basic auth with one of them. `host`: the address the server
    will listen on, when the caller knows it (else each request tells); without auth, one beyond
    loopback gets a warning. Without auth nobody may silence, unless `local_silences` (the
    opt-in of `fleetwatch dashboard --allow-local-silences`) on a loopback `host`: the person at
    the machine may (a ConfigError on any other `host`, or none). `names` maps a pinned cluster id to
    its configured name (`configured_names(config)`): the pages show a cluster by name first (a cluster
    no config names, by the target that last reported it).
    """
    store = Store(store_url)
    # No "Updating..." flicker in the tab title on every refresh. The style sheet (and the fleet
    # map's click handler) are served from dashboard/assets/.
    app = Dash(__name__, title="fleetwatch", update_title=None)
    content = PageContent(store, app.get_relative_path, tags, incidents, names)
    app.layout = frame_layout(app.get_relative_path, refresh_ms)
    app.validation_layout = validation_layout(app.layout, content.tag_options(), content.default_group)
    register_callbacks(app, store.engine, content)
    register_runbooks(app.server, app.get_relative_path, app.config.routes_pathname_prefix)
    guard_server(app.server, host, local_silences)
    return app
