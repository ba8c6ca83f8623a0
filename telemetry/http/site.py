"""aiohttp's ``TCPSite`` with kip714's connection gate in front of every connection.

Apart from :mod:`telemetry.http.connections` because aiohttp's sites have
``__slots__``: this subclass stays interpreted, the gate's protocol is
compiled.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from telemetry.http.connections import HttpConnectionGate

__all__ = ["GatedTCPSite"]


class GatedTCPSite(web.TCPSite):
    """aiohttp's ``TCPSite`` whose connections go through a :class:`HttpConnectionGate`."""

    __slots__ = ("_gate",)

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        gate: HttpConnectionGate,
        **kw: object,
    ) -> None:
        super().__init__(runner, host, port, **kw)  # type: ignore[arg-type]
        self._gate = gate

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        self._server = await loop.create_server(
            self._gate.factory(server),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port
