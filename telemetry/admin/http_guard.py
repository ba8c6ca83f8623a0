"""Which HTTP admin requests a browser may not make for a caller.

Who may call the HTTP admin API at all is the one authorizer's
(:meth:`telemetry.admin.authorizer.Authorizer.http_admin_request_refusal`):

* with ``[security]`` (``super_users`` set) a request needs the ``[admin]
  token`` as ``Authorization: Bearer``, or a verified client certificate
  whose principal is in ``super_users`` (as on the Kafka listener); else 401;
* with a token and no ``[security]``: the token (401 otherwise);
* with neither: only a listener bound to loopback answers (403 otherwise).

It applies the rules below to every request not carrying the token: such a
request could be made by a web page open in a browser on the host (the
browser attaches nothing a page cannot, except client certificates), so it is
refused with 403 when

* it carries an ``Origin`` header, or a ``Sec-Fetch-Site`` other than
  ``none`` / ``same-origin`` (a cross-site fetch or form post);
* its ``Host`` is not the address the connection arrived on, a loopback name
  or one of ``[admin] allowed_hosts`` (DNS rebinding: a page whose name now
  resolves to 127.0.0.1 reads the answers);
* it changes something (POST, DELETE) without ``Content-Type:
  application/json``, which no HTML form can send and which a cross-site
  ``fetch`` can send only after a CORS preflight this server never grants.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from aiohttp import web

_MUTATIONS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_SAME_SITE: Final = frozenset({"none", "same-origin"})


@dataclass(frozen=True, slots=True)
class Refusal:
    """An HTTP request refused: its status and why."""

    status: int
    message: str


def is_loopback_name(host: str) -> bool:
    """``localhost``, a ``*.localhost`` name (RFC 6761) or a loopback address."""
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port and IPv6 brackets."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    name, _, port = header.rpartition(":")
    return name if name and port.isdigit() else header


def browser_refusal(request: web.Request, allowed_hosts: frozenset[str]) -> Refusal | None:
    """Why a browser could have made ``request`` for its caller (None: it could not)."""
    headers = request.headers
    if "Origin" in headers:
        return Refusal(403, "the admin API refuses cross-origin requests (Origin header)")
    fetch_site = headers.get("Sec-Fetch-Site")
    if fetch_site is not None and fetch_site.lower() not in _SAME_SITE:
        return Refusal(403, f"the admin API refuses Sec-Fetch-Site: {fetch_site}")
    host = host_name(headers.get("Host", "")).lower().rstrip(".")
    if not (is_loopback_name(host) or host in allowed_hosts or _own_address(request, host)):
        return Refusal(403, f"the admin API refuses Host {host!r}: add it to [admin] allowed_hosts")
    if request.method in _MUTATIONS and request.content_type != "application/json":
        return Refusal(403, "an admin change needs Content-Type: application/json")
    return None


def _own_address(request: web.Request, host: str) -> bool:
    transport = request.transport
    sockname = transport.get_extra_info("sockname") if transport is not None else None
    if not sockname:
        return False
    try:
        return ipaddress.ip_address(host) == ipaddress.ip_address(sockname[0])
    except ValueError:
        return False
