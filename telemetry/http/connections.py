"""Admission and timeouts of HTTP connections, under the same ``[limits]`` as the Kafka listener.

Kafka's ``SocketServer`` applies one ``ConnectionQuotas`` to every listener;
so does kip714: each HTTP connection is admitted by the
:class:`~telemetry.enforcement.ConnectionLimits` the Kafka listener uses
(``max_connections`` and ``max_connections_per_ip`` count both listeners
together, ``[[quotas.ips]]`` rates apply too) and released when it closes.

aiohttp bounds none of a connection's waits but keep-alive (set from
``connections_max_idle_ms`` by the caller), so a socket that never sends a
byte held a descriptor for an hour. Here:

* a request head must arrive whole within ``[http] header_timeout_ms`` of the
  connection opening or of its first byte (later requests on a keep-alive
  connection);
* a body with a ``Content-Length`` or chunked encoding must arrive whole within
  ``[http] body_timeout_ms`` of the end of its head.

Refused and timed-out connections are counted (``/metrics``) and logged at
most once per address and minute, so a flood cannot flood the log too.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, cast

from telemetry.enforcement import AdmissionOutcome, RateLimitedLog

if TYPE_CHECKING:
    from collections.abc import Callable

    from telemetry.enforcement import ConnectionLimits

_log = logging.getLogger(__name__)

LISTENER_NAME: Final = "http"
DEFAULT_HEADER_TIMEOUT_MS: Final = 10_000
DEFAULT_BODY_TIMEOUT_MS: Final = 60_000
_HEAD_END: Final = b"\r\n\r\n"
_CHUNKED_END: Final = b"0\r\n\r\n"
_CONTENT_LENGTH: Final = re.compile(rb"\r\ncontent-length:[ \t]*(\d{1,18})[ \t]*\r\n", re.I)
_CHUNKED: Final = re.compile(rb"\r\ntransfer-encoding:[^\r\n]*chunked", re.I)
_MAX_HEAD_SCAN: Final = 64 * 1024


@dataclass
class HttpConnectionStats:
    """What the HTTP listener's admission did, for ``/metrics``."""

    open: int = 0
    accepted: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    closed: Counter[str] = field(default_factory=Counter)


class HttpConnectionGate:
    """Builds the protocol of each HTTP connection: admission, then the timeouts."""

    def __init__(
        self,
        limits: ConnectionLimits,
        clock: Callable[[], int],
        *,
        header_timeout_ms: int = DEFAULT_HEADER_TIMEOUT_MS,
        body_timeout_ms: int = DEFAULT_BODY_TIMEOUT_MS,
    ) -> None:
        self.limits = limits
        limits.add_listener(LISTENER_NAME)  # keeps its reserve of max_connections
        self.clock = clock
        self.header_timeout_s = header_timeout_ms / 1000
        self.body_timeout_s = body_timeout_ms / 1000
        self.stats = HttpConnectionStats()
        self.log = RateLimitedLog(_log)

    def factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: cast("asyncio.Protocol", _GatedProtocol(self, inner()))


class _GatedProtocol:
    """Admits the connection, then passes everything to aiohttp's handler, timing its reads.

    An ``asyncio.Protocol`` by its methods, not by subclassing: compiled
    (mypyc), only a class with no Python base is native, and the loop calls
    ``data_received`` on every read of every request.
    """

    def __init__(self, gate: HttpConnectionGate, inner: asyncio.Protocol) -> None:
        self._gate = gate
        self._inner = inner
        self._transport: asyncio.Transport | None = None
        # Cached: asyncio.get_running_loop() costs a getpid() system call on Python 3.11.
        self._loop = asyncio.get_running_loop()
        self._address = "?"
        self._serving = False
        self._counted = False
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: float | None = None  # loop time; None: no wait is being timed
        self._reason = ""
        # Where the reader is: a head (collecting it), a body (bytes left or chunked), between.
        self._head = bytearray()
        self._in_head = True
        self._body_left: int | None = None
        self._chunked_tail = b""
        self._chunked = False

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast("asyncio.Transport", transport)  # uvloop's is not a subclass
        gate = self._gate
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self._address = str(peer[0]) if peer else "?"
        admission = gate.limits.admit(LISTENER_NAME, self._address, gate.clock())
        self._counted = admission.counted
        if admission.outcome is not AdmissionOutcome.ADMITTED:
            reason = admission.reason.value if admission.reason is not None else "refused"
            gate.stats.refused[reason] += 1
            gate.log(
                self._address,
                "refused",
                "refusing HTTP connections from %s: %s reached",
                self._address,
                reason,
            )
            transport.abort()
            return
        gate.stats.accepted += 1
        gate.stats.open += 1
        self._serving = True
        self._inner.connection_made(transport)
        self._arm(gate.header_timeout_s, "header_timeout")
        if admission.wait_ms > 0:  # the broker-wide creation rate: served a little later
            transport.pause_reading()
            self._loop.call_later(admission.wait_ms / 1000, self._resume)

    def data_received(self, data: bytes) -> None:
        if not self._serving:
            return
        self._track(data)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if not self._serving:
            return None
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        gate = self._gate
        if self._counted:
            self._counted = False
            gate.limits.release(LISTENER_NAME, self._address)
        if self._serving:
            self._serving = False
            gate.stats.open -= 1
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._serving:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._serving:
            self._inner.resume_writing()

    # -- timeouts ----------------------------------------------------------------------------

    def _resume(self) -> None:
        if self._serving and self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def _arm(self, timeout_s: float, reason: str) -> None:
        """Set the deadline; a timer is scheduled only if none is due by then.

        Every request moves the deadline two or three times; cancelling and
        scheduling a timer each time cost more than the rest of the tracking.
        The one timer checks the deadline when it fires and follows it.
        """
        loop = self._loop
        deadline = loop.time() + timeout_s
        self._deadline, self._reason = deadline, reason
        timer = self._timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(deadline, self._check)

    def _disarm(self) -> None:
        self._deadline = None

    def _stop_timer(self) -> None:
        self._deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None:
            return
        loop = self._loop
        if loop.time() < deadline:
            self._timer = loop.call_at(deadline, self._check)
            return
        self._expired(self._reason)

    def _expired(self, reason: str) -> None:
        self._deadline = None
        gate = self._gate
        gate.stats.closed[reason] += 1
        gate.log(
            self._address, reason, "closing an HTTP connection from %s: %s", self._address, reason
        )
        if self._transport is not None:
            self._transport.abort()

    def _track(self, data: bytes) -> None:
        """Follow request boundaries well enough to time heads and bodies."""
        pos, size = 0, len(data)
        while pos < size:
            if self._in_head:
                if not self._head and self._deadline is None:  # a later request's first byte
                    self._arm(self._gate.header_timeout_s, "header_timeout")
                if not self._head:
                    # The usual case, a head starting the read: found in place,
                    # without copying the body behind it.
                    end = data.find(_HEAD_END, pos, pos + _MAX_HEAD_SCAN)
                    if end < 0:
                        self._head += data[pos : pos + _MAX_HEAD_SCAN]
                        return
                    stop = end + len(_HEAD_END)
                    self._start_body(data[pos:stop])
                    pos = stop
                    continue
                chunk = data[pos : pos + _MAX_HEAD_SCAN]
                end = (bytes(self._head[-3:]) + chunk).find(_HEAD_END)
                if end < 0:
                    self._head += chunk
                    del self._head[: max(0, len(self._head) - _MAX_HEAD_SCAN)]
                    return
                used = end + len(_HEAD_END) - min(3, len(self._head))
                self._head += data[pos : pos + used]
                pos += used
                self._start_body(bytes(self._head))
                self._head.clear()
            elif self._body_left is not None:
                taken = min(self._body_left, size - pos)
                self._body_left -= taken
                pos += taken
                if self._body_left == 0:
                    self._request_done()
            else:  # chunked: done at the last chunk (an approximation: trailers are rare)
                seen = self._chunked_tail + data[pos : pos + _MAX_HEAD_SCAN]
                end = seen.find(_CHUNKED_END)
                if end < 0:
                    self._chunked_tail = seen[-(len(_CHUNKED_END) - 1) :]
                    return
                used = end + len(_CHUNKED_END) - len(self._chunked_tail)
                pos += max(0, used)
                self._request_done()

    def _start_body(self, head: bytes) -> None:
        self._in_head = False
        if _CHUNKED.search(head):
            self._body_left, self._chunked_tail = None, b"\r\n"
            self._arm(self._gate.body_timeout_s, "body_timeout")
            return
        length = _CONTENT_LENGTH.search(head)
        size = int(length.group(1)) if length is not None else 0
        if size == 0:
            self._request_done()
            return
        self._body_left = size
        self._arm(self._gate.body_timeout_s, "body_timeout")

    def _request_done(self) -> None:
        """Between requests: aiohttp's keep-alive timeout governs the wait for the next one."""
        self._disarm()
        self._in_head = True
        self._body_left = None
        self._chunked_tail = b""
