"""The pipeline page: progress charts, the latest micro-batches, quarantine, the collectors' clocks
and the outbox."""

from __future__ import annotations

import html as html_text
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from dash import html
from plotly.subplots import make_subplots

from dashboard.views.elements import table_or_empty
from dashboard.views.formatting import format_age, format_number, format_ts

__all__ = ["pipeline_figure", "pipeline_tables", "source_clock_table"]


def _watermark(ms: int | None) -> int | None:
    """A recorded watermark, None before the first one: Spark reports the epoch (0) until then."""
    return ms if ms is not None and ms > 0 else None


# The pipeline charts: (key of the value, panel title), in reading order (left to right, top down).
_PIPELINE_CHARTS = (("input_rows_per_s", "Input rows/s"), ("processed_rows_per_s", "Processed rows/s"),
                    ("batch_duration_s", "Batch duration (s)"),
                    ("watermark_lag_s", "Watermark lag (s): wall clock - watermark"))
_QUERY_COLOURS = ("#1e6fd9", "#d9730d", "#2e9d4f", "#8e44ad")


def _chart_values(batches: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Each chart's values (NaN where missing: a gap in the line)."""
    def column(values: Iterable[float | None]) -> np.ndarray:
        return np.array([np.nan if v is None else v for v in values], dtype=float)

    return {"input_rows_per_s": column(b["input_rows_per_s"] for b in batches),
            "processed_rows_per_s": column(b["processed_rows_per_s"] for b in batches),
            "batch_duration_s": column(b["batch_duration_ms"] for b in batches) / 1000,
            # As /metrics reads it: how far detection trails the wall clock (the allowed lateness included).
            "watermark_lag_s": (np.array([b["recorded_at"] for b in batches], dtype=float)
                                - column(_watermark(b["watermark_ms"]) for b in batches)) / 1000}


def pipeline_figure(batches: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Input and processed rows/s, batch duration and watermark lag over wall-clock time (UTC),
    one line per streaming query, from `queries.pipeline.pipeline_series` (oldest first)."""
    fig = make_subplots(rows=2, cols=2, shared_xaxes=True, subplot_titles=[t for _, t in _PIPELINE_CHARTS],
                        vertical_spacing=0.14, horizontal_spacing=0.08)
    names = list(dict.fromkeys(b["query"] for b in batches))
    for i, query in enumerate(names):
        mine = [b for b in batches if b["query"] == query]
        # numpy arrays: plotly checks and encodes them whole (2,000 points as lists cost ~25x more).
        x = np.array([b["recorded_at"] for b in mine], dtype="datetime64[ms]")
        batch_ids = np.array([b["batch_id"] for b in mine], dtype=np.int64)
        values = _chart_values(mine)
        name = html_text.escape(query)  # plotly reads a little HTML in names
        for n, (key, _) in enumerate(_PIPELINE_CHARTS):
            fig.add_trace(go.Scatter(
                x=x, y=values[key], name=name, meta=key, legendgroup=name,
                showlegend=n == 0 and len(names) > 1, mode="lines+markers", marker={"size": 4},
                line={"color": _QUERY_COLOURS[i % len(_QUERY_COLOURS)], "width": 1.5}, customdata=batch_ids,
                hovertemplate=f"%{{y:,.2f}} at %{{x}}<br>batch %{{customdata}}<extra>{name}</extra>"),
                row=n // 2 + 1, col=n % 2 + 1)
    fig.update_layout(
        # The height comes from the page (the graph fills its box): see layouts.pipeline_layout.
        margin={"l": 50, "r": 20, "t": 50, "b": 30},
        # Top left: plotly's tool bar takes the top right on hover.
        legend={"orientation": "h", "x": 0, "y": 1.06, "yanchor": "bottom"},
        paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)", hovermode="closest",
        # Keep the user's zoom across live refreshes.
        uirevision="pipeline")
    fig.update_xaxes(type="date")
    fig.update_yaxes(rangemode="tozero")
    if not batches:
        fig.add_annotation(text="No batch recorded yet.", showarrow=False, xref="paper", yref="paper",
                           x=0.5, y=0.5)
    return fig


def _lead(ms: int) -> str:
    """A lead in seconds, signed: + ahead of the job's clock, - behind it."""
    return f"{ms / 1000:+,.1f} s"


def source_clock_table(clocks: list[dict[str, Any]]) -> html.Div:
    """The collectors whose event times lead the job's clock the most (`queries.pipeline.source_clock_rows`);
    a row is marked `ahead` when the source had events refused for it."""
    rows = [html.Tr([html.Td(c["source"], className="mono"), html.Td(_lead(c["lead_ms"]), className="num"),
                     html.Td(format_number(c["events"]), className="num"),
                     html.Td(format_number(c["ahead"]), className="num"),
                     html.Td(format_number(c["quarantined"]), className="num"),
                     html.Td(format_ts(c["updated_ms"]))],
                    className="source-clock-row ahead" if c["ahead"] or c["quarantined"] else "source-clock-row")
            for c in clocks]
    head = ["Source", ("Lead", "num"), ("Events", "num"), ("Refused ahead", "num"),
            ("In quarantine (ahead)", "num"), "Last batch"]
    return html.Div([
        html.P("How far each collector's event times ran ahead of the job's clock in the latest micro-batch "
               "with its events (negative: delivery delay). Events more than rules.max_source_lead_ms ahead are "
               "quarantined (ts_ahead_of_clock): they would move the watermark and make every other "
               "collector's events late.", className="muted"),
        table_or_empty(head, rows, "No event parsed yet."),
    ], id="source-clocks")


def pipeline_tables(batches: list[dict[str, Any]], reasons: list[dict[str, Any]],
                    backlog: dict[str, Any], now_ms: int, clocks: list[dict[str, Any]] | None = None) -> html.Div:
    """Latest micro-batches, quarantine by reason, the collectors' clocks and the notifier's backlog."""
    batch_rows = [html.Tr(
        [html.Td(b["query"]), html.Td(b["batch_id"], className="num"), html.Td(format_ts(b["recorded_at"])),
         html.Td(format_number(b["input_rows"]), className="num"),
         html.Td(format_number(b["input_rows_per_s"], 1), className="num"),
         html.Td(format_number(b["processed_rows_per_s"], 1), className="num"),
         html.Td(format_age(b["batch_duration_ms"]), className="num"),
         html.Td(format_ts(_watermark(b["watermark_ms"]))),
         html.Td(format_number(b["state_rows"]), className="num"),
         html.Td(format_number(None if b["state_memory_bytes"] is None else b["state_memory_bytes"] / 2**20, 1),
                 className="num")],
        className="batch-row") for b in batches]
    batch_head = ["Query", ("Batch", "num"), "Recorded", ("Input rows", "num"), ("Input rows/s", "num"),
                  ("Processed rows/s", "num"), ("Duration", "num"), "Watermark", ("State rows", "num"),
                  ("State MiB", "num")]
    reason_rows = [html.Tr([html.Td(r["reason"], className="mono"),
                            html.Td(format_number(r["messages"]), className="num"),
                            html.Td(format_number(r["not_stored"]), className="num"),
                            html.Td(format_ts(r["last_ms"]))], className="quarantine-row") for r in reasons]
    oldest = backlog["oldest_created_ms"]
    outbox_line = (f"{backlog['pending']:,} notifications waiting, {backlog['failing']:,} after a failed "
                   f"attempt; oldest queued {format_age(now_ms - oldest)} ago" if backlog["pending"]
                   else "Every notification has been delivered.")
    return html.Div([
        html.H2("Latest micro-batches"),
        table_or_empty(batch_head, batch_rows, "No batch recorded yet."),
        html.H2("Quarantined messages by reason"),
        html.Div([table_or_empty(["Reason", ("Messages", "num"), ("Not stored", "num"), "Last seen"], reason_rows,
                                 "Nothing quarantined."),
                  html.P("Not stored: over store.retention.quarantine_rows_per_reason of their reason in one "
                         "micro-batch, counted only. A stored message keeps its first 4 KiB.", className="muted")],
                 id="quarantine"),
        html.H2("Collector clocks"),
        source_clock_table(clocks or []),
        html.H2("Notifier outbox"),
        html.P(outbox_line, id="outbox"),
    ])
