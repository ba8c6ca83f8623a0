"""The report as one HTML file: inline CSS and SVG, no script, no external reference.

It opens on the fleet (inventory, health states, the period's alerts), then
lists the clients and gives each a section of its own. The page is at most
1,232 px wide (1,280 with the margins): long names wrap inside their cells.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Final

from report.model import HEALTHY
from report.svg import line_chart

if TYPE_CHECKING:
    import datetime as dt

    from report.model import Alert, ClientReport, Fleet, InventoryLine, QuotaAdviceLine

__all__ = ["render"]

_STYLE: Final = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #fff;
       max-width: 1232px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 8px; border-bottom: 2px solid #ddd; }
h3 { font-size: 15px; margin: 24px 0 6px; }
p.range { color: #555; margin: 0 0 16px; }
p.note, figcaption { color: #555; font-size: 12px; }
p.note { max-width: 940px; }
table { border-collapse: collapse; margin: 4px 0 8px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: right;
         vertical-align: top; }
th { background: #f3f3f3; }
td.text, th.text { text-align: left; }
td.word { white-space: nowrap; }
td.long { overflow-wrap: anywhere; }
td.id { font-family: ui-monospace, monospace; font-size: 12px; text-align: left; }
span.alt { color: #666; display: block; }
.side { display: flex; flex-wrap: wrap; gap: 32px; }
.state-critical { color: #b00020; font-weight: 600; }
.state-warning { color: #a15c00; font-weight: 600; }
.state-info { color: #0b57a4; }
.state-healthy { color: #1b7a35; }
.charts { display: grid; grid-template-columns: repeat(2, 460px); gap: 12px 24px; }
figure { margin: 0; width: 460px; }
svg.chart { background: #fff; }
svg .title { font-size: 13px; font-weight: 600; fill: #222; }
svg .tick { font-size: 10px; fill: #555; }
svg .end { text-anchor: end; }
svg .empty { font-size: 12px; fill: #888; text-anchor: middle; }
svg .frame { fill: none; stroke: #bbb; stroke-width: 1; }
"""
_STATE_NOTE: Final = (
    '<p class="note">A client\'s state is the worst severity among the health rules it fired '
    "in this period (<code>client_alerts_1h</code>; the rules: <code>kip714 alerts prometheus"
    "</code> prints them); healthy: it fired none.</p>"
)
_CLIENTS_NOTE: Final = (
    '<p class="note">pushes: telemetry pushes landed (<code>client_inventory_1h</code>). '
    "latency p99: the 99th percentile, per hour, of the client's pushed "
    "<code>node.request.latency.avg</code> values at its worst broker, the worst hour shown "
    "(<code>client_health_1h</code>); latency max: the largest <code>node.request.latency.max"
    "</code>. throttle max: the largest throttle time a broker asked. new connections: the "
    "increase of <code>connection.creation.total</code> over the pushed intervals (librdkafka "
    "counts every connect attempt; its first push starts after its first connections, so a "
    "client that kept the connections it opened at start shows 0).</p>"
)


def render(fleet: Fleet, period: str, sources: str) -> str:
    """The whole document; ``period`` and ``sources`` (the tables read) show under the title."""
    clients = fleet.clients
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # Nothing may load from anywhere: the browser enforces that the file stands alone.
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        "<title>kip714 client health</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>kip714 client health</h1>",
        f'<p class="range">{escape(period)} · {_count(len(clients))} client instance(s) · '
        f"from {escape(sources)}</p>",
    ]
    if not clients:
        body.append("<p>No rollup rows in this range: run <code>kip714 rollup</code> first.</p>")
        body.append("</body></html>")
        return "\n".join(body)
    body += _fleet(fleet)
    body += _alerts_section(fleet.alerts)
    body += _throttled_section(clients)
    body += _quota_section(fleet.quota_advice)
    body += ['<h2 id="clients">Clients</h2>', _client_table(clients), _CLIENTS_NOTE]
    for index, client in enumerate(clients):
        body += _client_section(index, client, fleet.window)
    body.append("</body></html>")
    return "\n".join(body)


def _fleet(fleet: Fleet) -> list[str]:
    kinds: dict[str, int] = {}
    for client in fleet.clients:
        kind = client.client_type or "client of unknown type"
        kinds[kind] = kinds.get(kind, 0) + 1
    summary = ", ".join(f"{_count(n)} {escape(kind)}(s)" for kind, n in sorted(kinds.items()))
    states = "".join(
        f'<tr><td class="text state-{state}">{state}</td><td>{_count(n)}</td></tr>'
        for state, n in fleet.states().items()
    )
    software = _inventory_table("by-software", ("type", "software", "version"), fleet.by_software())
    principals = _inventory_table(
        "by-principal", ("principal", "ingest node"), fleet.by_principal()
    )
    return [
        '<h2 id="fleet">Fleet</h2>',
        f"<p>{_count(len(fleet.clients))} client instance(s): {summary}.</p>",
        '<div class="side"><div><h3>Health states</h3>'
        f'<table id="states"><tr><th class="text">state</th><th>clients</th></tr>{states}'
        f"</table></div>",
        f'<div id="inventory"><h3>Inventory</h3>{software}{principals}</div></div>',
        _STATE_NOTE,
    ]


def _inventory_table(table_id: str, titles: tuple[str, ...], lines: list[InventoryLine]) -> str:
    head = "".join(f'<th class="text">{t}</th>' for t in titles) + "<th>clients</th><th>pushes</th>"
    rows = "".join(
        "<tr>"
        + "".join(f'<td class="text long">{escape(part)}</td>' for part in line.key)
        + f"<td>{_count(line.instances)}</td><td>{_count(line.pushes)}</td></tr>"
        for line in lines
    )
    return f'<table id="{table_id}"><tr>{head}</tr>{rows}</table>'


def _alerts_section(alerts: list[Alert]) -> list[str]:
    title = '<h2 id="alerts">Alerts of the period, worst first</h2>'
    if not alerts:
        return [title, "<p>No health rule fired in this period.</p>"]
    return [
        title,
        _alert_table(alerts, with_client=True),
        '<p class="note">One row per client, rule and hour it fired in (<code>client_alerts_1h'
        "</code>); value: the worst value of the rule's aggregation in that hour.</p>",
    ]


def _alert_table(alerts: list[Alert], *, with_client: bool) -> str:
    titles = ["severity", "rule", *(["client"] if with_client else []), "first fired"]
    titles += ["last fired", "value", "threshold", "meaning"]
    head = "".join(
        f'<th class="{"" if t in ("value", "threshold") else "text"}">{t}</th>' for t in titles
    )
    rows = []
    for alert in alerts:
        client = f'<td class="text">{escape(alert.client_id or alert.client_instance_id)}</td>'
        rows.append(
            f'<tr><td class="text state-{escape(alert.severity)}">{escape(alert.severity)}</td>'
            f'<td class="text">{escape(alert.rule)}</td>{client if with_client else ""}'
            f'<td class="text">{_moment(alert.first_fired)}</td>'
            f'<td class="text">{_moment(alert.last_fired)}</td>'
            f"<td>{_number(alert.value)}</td><td>{_number(alert.threshold)}</td>"
            f'<td class="text">{escape(alert.meaning)}</td></tr>'
        )
    return f'<table class="alerts"><tr>{head}</tr>{"".join(rows)}</table>'


def _throttled_section(clients: list[ClientReport]) -> list[str]:
    """Where today's quotas bite: every client a broker throttled in the period."""
    title = '<h2 id="throttled">Throttled clients</h2>'
    throttled = sorted(
        (c for c in clients if (c.throttle_max_ms or 0) > 0),
        key=lambda c: (-(c.throttle_max_ms or 0), c.client_id or ""),
    )
    if not throttled:
        return [
            title,
            "<p>No client was throttled in this period (every pushed "
            "<code>produce.throttle.time.max</code> was 0 or absent).</p>",
        ]
    rows = "".join(
        f'<tr><td class="text">{escape(c.client_id or "-")}</td>'
        f'<td class="id">{escape(c.client_instance_id)}</td>'
        f'<td class="text long">{escape(c.principal or "-")}</td>'
        f"<td>{_number(c.throttle_max_ms)}</td></tr>"
        for c in throttled
    )
    head = (
        '<tr><th class="text">client</th><th class="text">instance id</th>'
        '<th class="text">principal</th><th>throttle max ms</th></tr>'
    )
    return [
        title,
        f'<table id="throttled-clients">{head}{rows}</table>',
        '<p class="note">throttle max: the largest <code>produce.throttle.time.max</code> the '
        "client pushed (<code>client_health_1h.throttle_time_max_ms</code>): a broker's quota "
        "delayed it (<code>kip714 quotas advise</code> proposes quotas from observed demand).</p>",
    ]


def _quota_section(advice: list[QuotaAdviceLine] | None) -> list[str]:
    """How to define the quotas: each entity's observed demand and KIP-599's proposal."""
    title = '<h2 id="quota-advice">Quota advice</h2>'
    if advice is None:
        return [
            title,
            "<p>No <code>quota_advice_1h</code> table: run <code>kip714 rollup</code>.</p>",
        ]
    if not advice:
        return [
            title,
            "<p>No quota demand in this period: no client pushed a byte rate (Java clients' "
            "<code>outgoing.byte.rate</code> / <code>incoming.byte.rate</code>; librdkafka "
            "pushes none) and the landing holds no push sizes.</p>",
        ]
    rows = "".join(
        f'<tr><td class="text">{escape(line.quota)}</td>'
        f'<td class="text">{escape(line.user)}</td>'
        f'<td class="text">{escape(line.client_id or "-")}</td>'
        f"<td>{_number(line.peak_byte_rate)}</td><td>{_number(line.mean_byte_rate)}</td>"
        f"<td>{_number(line.proposal_byte_rate)}</td><td>{_count(line.hours)}</td></tr>"
        for line in advice
    )
    head = (
        '<tr><th class="text">quota</th><th class="text">user</th><th class="text">client</th>'
        "<th>peak B/s</th><th>mean B/s</th><th>proposal B/s</th><th>hours</th></tr>"
    )
    headroom = ", ".join(sorted({f"{line.headroom:g}" for line in advice}))
    return [
        title,
        f'<table id="quota-advice-table">{head}{rows}</table>',
        '<p class="note">Per quota entity (user, client-id) over the period '
        "(<code>quota_advice_1h</code>): the byte rate of its busiest minute and its mean over "
        f"the minutes with demand; proposal: the peak x the headroom ({escape(headroom)}), "
        "KIP-599's method. <code>kip714 quotas advise</code> replays the demand through "
        "Kafka's quota algorithm (how often a proposal would throttle), proposes the default "
        "entities, and sets kip714's own push quotas (<code>--apply</code>).</p>",
    ]


_CLIENT_COLUMNS: Final = (
    ("client", "text"),
    ("type", "text"),
    ("state", "text"),
    ("software", "text"),
    ("instance id", "text"),
    ("pushes", ""),
    ("latency p99 ms", ""),
    ("latency max ms", ""),
    ("throttle max ms", ""),
    ("new connections", ""),
)


def _client_table(clients: list[ClientReport]) -> str:
    head = "".join(f'<th class="{css}">{escape(title)}</th>' for title, css in _CLIENT_COLUMNS)
    rows = []
    for client in clients:
        rows.append(
            "<tr>"
            f'<td class="text">{escape(client.client_id or "-")}</td>'
            f'<td class="text word">{escape(client.client_type or "-")}</td>'
            f'<td class="text word state-{client.state}">{client.state}</td>'
            f'<td class="text">{escape(client.software or "-")}</td>'
            f'<td class="id">{_instance(client)}</td>'
            f"<td>{_count(client.pushes)}</td>"
            f"<td>{_number(client.latency_p99_ms)}</td>"
            f"<td>{_number(client.latency_max_ms)}</td>"
            f"<td>{_number(client.throttle_max_ms)}</td>"
            f"<td>{_count(client.connections_created)}</td></tr>"
        )
    return f'<table id="health"><tr>{head}</tr>{"".join(rows)}</table>'


def _instance(client: ClientReport) -> str:
    """Kafka's form; librdkafka's beside it for librdkafka clients."""
    kafka = escape(client.client_instance_id)
    librdkafka = client.librdkafka_instance_id
    if librdkafka is None:
        return kafka
    return f'{kafka}<span class="alt">librdkafka logs: {escape(librdkafka)}</span>'


def _client_section(index: int, client: ClientReport, window: str | None) -> list[str]:
    facts = [
        f'state <span class="state-{client.state}">{client.state}</span>',
        f"software {escape(client.software or '-')}",
        f"principal {escape(client.principal or '-')}",
        f"ingest node {escape(client.ingest_node or '-')}",
        f"pushes {_count(client.pushes)}",
        f"data points {_count(client.points)}",
    ]
    per = f"per {escape(window)} window" if window else "per window"
    parts = [
        f'<section id="client-{index}" class="client"><h3>{escape(_name(client))}</h3>',
        f'<p class="note">instance id {_instance(client)}</p>',
        f"<p>{' · '.join(facts)}</p>",
    ]
    if client.alerts:
        parts.append(_alert_table(client.alerts, with_client=False))
    elif client.state == HEALTHY:
        parts.append('<p class="note">No health rule fired for this client in this period.</p>')
    parts.append('<div class="charts">')
    for n, chart in enumerate(client.charts):
        svg = line_chart(f"chart-{index}-{n}", chart.title, chart.unit, chart.series)
        parts.append(
            f"<figure>{svg}<figcaption>{escape(chart.meaning)} ({per})</figcaption></figure>"
        )
    parts.append("</div></section>")
    return parts


def _name(client: ClientReport) -> str:
    kind = f" ({client.client_type})" if client.client_type else ""
    return f"{client.client_id or '-'}{kind}"


def _count(value: int | None) -> str:
    """Counts are integers, with thousands separators."""
    return "-" if value is None else f"{value:,}"


def _number(value: float | None) -> str:
    """Measured values: three significant digits, at most one decimal above 100."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _moment(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S")
