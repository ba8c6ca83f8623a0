"""The report as one HTML file: inline CSS and SVG, no script, no external reference."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Final

from report.svg import line_chart

if TYPE_CHECKING:
    from report.model import ClientReport

__all__ = ["render"]

_STYLE: Final = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 28px 0 6px; }
p.range { color: #555; margin: 0 0 16px; }
p.note { color: #555; max-width: 940px; font-size: 12px; }
table { border-collapse: collapse; }
th, td { padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: right; }
th { background: #f3f3f3; }
td.text, th.text { text-align: left; white-space: nowrap; }
.charts { display: grid; grid-template-columns: repeat(2, 460px); gap: 12px; }
svg.chart { background: #fff; }
svg .title { font-size: 13px; font-weight: 600; fill: #222; }
svg .tick { font-size: 10px; fill: #555; }
svg .end { text-anchor: end; }
svg .empty { font-size: 12px; fill: #888; text-anchor: middle; }
svg .frame { fill: none; stroke: #bbb; stroke-width: 1; }
"""
_CONNECTION_NOTE: Final = (
    '<p class="note">conn tries/s and the connection chart are the client\'s own '
    "<code>connection.creation.rate</code>. librdkafka counts every connect attempt, also the "
    "postponed attempts (about one a second) of a consumer's group coordinator that has no "
    "address yet, as against kip714, which is no group coordinator: compare with kip714's "
    "<code>kip714_kafka_connections_closed_total</code>.</p>"
)
_COLUMNS: Final = (
    ("client", "text"),
    ("type", "text"),
    ("instance", "text"),
    ("software", "text"),
    ("hours", ""),
    ("latency avg ms", ""),
    ("latency p99 ms", ""),
    ("latency max ms", ""),
    ("queue avg ms", ""),
    ("throttle max ms", ""),
    ("conn tries/s", ""),
    ("connections", ""),
)


def render(
    clients: list[ClientReport],
    period: str,
    sources: str,
) -> str:
    """The whole document; ``period`` and ``sources`` (the tables read) show under the title."""
    stamp = period
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # Nothing may load from anywhere: the browser enforces that the file stands alone.
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        "<title>kip714 client health</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>kip714 client health</h1>",
        f'<p class="range">{escape(stamp)} · {len(clients)} client instance(s), '
        f"worst request latency p99 first · from {escape(sources)}</p>",
    ]
    if not clients:
        body.append("<p>No rollup rows in this range: run <code>kip714 rollup</code> first.</p>")
    else:
        body.append(_table(clients))
        body.append(_CONNECTION_NOTE)
    for index, client in enumerate(clients):
        body.append(f'<h2 id="client-{index}">{escape(_name(client))}</h2><div class="charts">')
        body += [
            line_chart(f"chart-{index}-{n}", chart.title, chart.unit, chart.series)
            for n, chart in enumerate(client.charts)
        ]
        body.append("</div>")
    body.append("</body></html>")
    return "\n".join(body)


def _table(clients: list[ClientReport]) -> str:
    head = "".join(f'<th class="{css}">{escape(title)}</th>' for title, css in _COLUMNS)
    rows = []
    for client in clients:
        cells = [
            (client.client_id or "-", "text"),
            (client.client_type or "-", "text"),
            (client.client_instance_id, "text"),
            (client.software or "-", "text"),
            (str(client.hours), ""),
            (_number(client.latency_avg_ms), ""),
            (_number(client.latency_p99_ms), ""),
            (_number(client.latency_max_ms), ""),
            (_number(client.queue_avg_ms), ""),
            (_number(client.throttle_max_ms), ""),
            (_number(client.connection_rate), ""),
            (_number(client.connections_created), ""),
        ]
        rows.append(
            "<tr>" + "".join(f'<td class="{css}">{escape(text)}</td>' for text, css in cells)
        )
    return f'<table id="health"><tr>{head}</tr>{"".join(rows)}</table>'


def _name(client: ClientReport) -> str:
    kind = f" ({client.client_type})" if client.client_type else ""
    return f"{client.client_id or '-'}{kind} · {client.client_instance_id}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
