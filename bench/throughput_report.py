"""How bench/throughput.py shows its results: a table on stdout, and a chart (HTML and PNG)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from throughput_measures import SESSION_TIMEOUT_MS, FleetResult, events_per_s

__all__ = ["print_table", "write_chart"]


def print_table(results: list[FleetResult]) -> None:
    columns = [("fleet", "fleet", "{}"), ("offered/s", "offered_events_per_s", "{:,.0f}"),
               ("processed/s", "processed_events_per_s", "{:,.0f}"), ("max/s", "max_events_per_s", "{:,.0f}"),
               ("raw/s", "raw_ingest_events_per_s", "{:,.0f}"), ("max/raw", "ratio_to_raw", "{:.2f}"),
               ("p50 ms", "p50_detection_latency_ms", "{:,.0f}"), ("p99 ms", "p99_detection_latency_ms", "{:,.0f}"),
               ("alerts", "alerts_measured", "{}"), ("max batch ms", "max_batch_duration_ms", "{:,}"),
               ("max lag s", "max_lag_s", "{:.1f}"), ("state rows", "state_rows", "{:,}"),
               ("peak RSS MB", "peak_rss_mb", "{:,.0f}")]
    cells = [[head for head, _, _ in columns]]
    for r in results:
        values = asdict(r)
        cells.append(["-" if values[key] is None else fmt.format(values[key]) for _, key, fmt in columns])
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    for r in results:
        print(f"{r.fleet}: {r.limited_by}; sustained={r.sustained}")
        print(f"{r.fleet}: yardstick (the reference detector, {r.reference_cpu_s_per_100k} CPU s per 100k events): "
              f"live job {r.live_to_reference_cpu} x its CPU per event, replay {r.replay_to_reference} x its events/s")
        for name, total, parts in (("RSS", r.peak_rss_mb, r.peak_rss_parts_mb),
                                   ("PSS", r.peak_pss_mb, r.peak_pss_parts_mb)):
            shares = ", ".join(f"{kind} {mb:,.0f}" for kind, mb in sorted(parts.items()))
            print(f"{r.fleet}: peak {name} {total:,.0f} MB = {shares}")


def write_chart(results: list[FleetResult], out_dir: Path) -> list[Path]:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    sizes = [r.clusters for r in results]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("throughput (events/s)", "detection latency (ms)"))
    # What the fleet would send in real time: above "offered" where the simulator fell behind.
    fig.add_trace(go.Scatter(x=sizes, y=[events_per_s(r.clusters, r.brokers) for r in results],
                             name="fleet's real rate", mode="lines+markers", line={"dash": "dot"}), row=1, col=1)
    for name, key in (("offered", "offered_events_per_s"), ("processed (live)", "processed_events_per_s"),
                      ("full job max", "max_events_per_s"), ("raw ingest", "raw_ingest_events_per_s")):
        fig.add_trace(go.Scatter(x=sizes, y=[getattr(r, key) for r in results], name=name, mode="lines+markers"),
                      row=1, col=1)
    for name, key in (("p50", "p50_detection_latency_ms"), ("p99", "p99_detection_latency_ms")):
        fig.add_trace(go.Scatter(x=sizes, y=[getattr(r, key) for r in results], name=f"latency {name}",
                                 mode="lines+markers"), row=1, col=2)
    fig.add_hline(y=SESSION_TIMEOUT_MS + 3000, line_dash="dot", annotation_text="session timeout + 3 s", row=1, col=2)
    fig.update_xaxes(type="log", title_text="clusters (x12 brokers)")
    fig.update_layout(title="fleetwatch on this machine", width=1200, height=500)
    out_dir.mkdir(parents=True, exist_ok=True)
    html, png = out_dir / "throughput.html", out_dir / "throughput.png"
    fig.write_html(html, include_plotlyjs="cdn")
    fig.write_image(png)
    return [html, png]
