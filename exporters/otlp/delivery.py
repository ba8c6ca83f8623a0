"""One OTLP/HTTP request delivered: retried until the backend takes it or refuses it for good.

The OTLP/HTTP specification decides what a status means: 2xx is delivered
(perhaps with ``partial_success``: points the backend rejected, counted and
logged); 429, 502, 503 and 504 are retryable, after ``Retry-After`` when the
backend sends one; 400 (bad data) and 413 (too large) are never retried as
they are: a multi-push request is split in halves and each half delivered on
its own, so the answer is narrowed down (bisected) to the pushes that cause
it, and only a push that is refused alone is dropped and counted. One bad
push among n costs about 2·log2(n) extra requests.
Connection failures and timeouts are retried too. Every other status (401,
403, 404, 500, ...) means a misconfigured or broken backend rather than bad
data: the specification would drop the request, but dropping a backlog
because a token expired would lose data the ingest log still holds, so
those are retried with backoff as well, and readiness shows it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import gzip
import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import aiohttp
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from exporters.otlp.settings import OtlpSettings

__all__ = ["RETRYABLE_STATUSES", "Delivered", "Delivery", "retry_after_s"]

_log = logging.getLogger(__name__)

#: The statuses OTLP/HTTP names retryable (specification, "Retryable Response Codes").
RETRYABLE_STATUSES: Final = frozenset({429, 502, 503, 504})
#: Statuses that say the data itself is unacceptable: dropped, never retried.
_BAD_DATA: Final = frozenset({400, 413})
#: A ``Retry-After`` longer than this is taken as this (a confused backend must not park us).
MAX_RETRY_AFTER_S: Final = 300.0
_MAX_RESPONSE_BYTES: Final = 64 * 1024


@dataclass(slots=True)
class Delivered:
    """What became of the pushes of one request (or, added up, of all requests)."""

    requests: int = 0
    delivered_pushes: int = 0
    #: Pushes the backend refused as bad data (400) or too large (413) when sent alone.
    dropped_pushes: int = 0
    rejected_data_points: int = 0
    #: Multi-push requests answered 400 or 413 and split in halves to find the culprits.
    split_requests: int = 0

    def add(self, other: Delivered) -> None:
        self.requests += other.requests
        self.delivered_pushes += other.delivered_pushes
        self.dropped_pushes += other.dropped_pushes
        self.rejected_data_points += other.rejected_data_points
        self.split_requests += other.split_requests


class Delivery:
    """Sends request bodies for one exporter; ``on_attempt`` hears every failure and success."""

    def __init__(
        self,
        settings: OtlpSettings,
        session: aiohttp.ClientSession,
        on_attempt: Callable[[str | None], Awaitable[None]],
    ) -> None:
        self._settings = settings
        self._session = session
        self._on_attempt = on_attempt
        self._headers = {
            **dict(settings.headers),
            "Content-Type": "application/x-protobuf",
        }
        if settings.compression == "gzip":
            self._headers["Content-Encoding"] = "gzip"

    async def deliver(self, bodies: Sequence[bytes]) -> Delivered:
        """Deliver the concatenation of ``bodies`` (one per push); returns only when done."""
        outcome = Delivered()
        if not any(bodies):
            outcome.delivered_pushes = len(bodies)
            return outcome
        body = b"".join(bodies)
        if self._settings.compression == "gzip":
            body = await asyncio.to_thread(gzip.compress, body, 6)
        delay_ms = float(self._settings.retry_initial_ms)
        while True:
            try:
                status, retry_after, answer = await self._post(body)
            except (aiohttp.ClientError, TimeoutError) as error:
                problem = f"POST {self._settings.endpoint} failed: {type(error).__name__}: {error}"
                wait_s = _jitter(delay_ms)
            else:
                if 200 <= status < 300:
                    await self._on_attempt(None)
                    outcome.requests += 1
                    outcome.delivered_pushes += len(bodies)
                    outcome.rejected_data_points += _rejected_points(answer)
                    return outcome
                if status in _BAD_DATA and len(bodies) > 1:
                    await self._on_attempt(None)  # the backend answered: it is up
                    outcome.split_requests += 1
                    middle = len(bodies) // 2
                    for half in (bodies[:middle], bodies[middle:]):
                        outcome.add(await self.deliver(half))
                    return outcome
                if status in _BAD_DATA:
                    await self._on_attempt(None)
                    outcome.dropped_pushes += len(bodies)
                    _log.error(
                        "otlp exporter: %s refused %d push(es) as bad data (HTTP %d): %s",
                        self._settings.endpoint,
                        len(bodies),
                        status,
                        answer[:500].decode(errors="replace"),
                    )
                    return outcome
                problem = f"POST {self._settings.endpoint} answered HTTP {status}"
                wait_s = retry_after if retry_after is not None else _jitter(delay_ms)
            await self._on_attempt(problem)
            await asyncio.sleep(wait_s)
            delay_ms = min(delay_ms * 2, self._settings.retry_max_ms)

    async def _post(self, body: bytes) -> tuple[int, float | None, bytes]:
        async with self._session.post(
            self._settings.endpoint, data=body, headers=self._headers
        ) as response:
            answer = await response.content.read(_MAX_RESPONSE_BYTES)
            retry_after = None
            if response.status in RETRYABLE_STATUSES:
                retry_after = retry_after_s(response.headers.get("Retry-After"))
            return response.status, retry_after, answer


def retry_after_s(value: str | None, now: dt.datetime | None = None) -> float | None:
    """``Retry-After`` (delay-seconds or an HTTP-date, RFC 9110 §10.2.3) in seconds, or ``None``."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return min(float(text), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    seconds = (when - (now or dt.datetime.now(dt.UTC))).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def _rejected_points(answer: bytes) -> int:
    if not answer:
        return 0
    response = ExportMetricsServiceResponse()
    try:
        response.ParseFromString(answer)
    except DecodeError:
        return 0
    rejected = int(response.partial_success.rejected_data_points)
    if rejected or response.partial_success.error_message:
        _log.warning(
            "otlp exporter: the backend rejected %d data point(s): %s",
            rejected,
            response.partial_success.error_message,
        )
    return rejected


def _jitter(delay_ms: float) -> float:
    # Full jitter, so many exporters retrying one backend do not retry in step.
    return random.uniform(0.5, 1.0) * delay_ms / 1000
