"""Where password hashes are computed: a small pool of their own, never the loop's executor.

A SASL/PLAIN check (or an HTTP ``Authorization: Basic`` one) is one PBKDF2
of tens of milliseconds. Run on the event loop's default executor, a flood of
wrong passwords queues ahead of the metadata store's appends, the exporters'
reads and commits; run on the loop, it stalls every connection. So checks
run on ``[security] password_check_threads`` threads of their own (default
1: a flood costs at most one core), and a check whose connection has closed
is dropped from the queue before it costs anything. The queue itself is
bounded (``[security] password_check_queue``, default 32 checks waiting
beyond the running ones): a door that finds it full refuses at once (HTTP
answers 503 with ``Retry-After``) instead of making every client wait
behind a flood.

An unknown user costs the same as a known one: the password is hashed
against a dummy credential with the users' iteration count, so timing does
not tell which user names exist.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeVar

from telemetry.security.settings import DEFAULT_HASH_ITERATIONS, PasswordHash

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

T = TypeVar("T")

DEFAULT_PASSWORD_CHECK_THREADS: Final = 1
#: Checks that may wait for a thread beyond those running (``[security] password_check_queue``).
DEFAULT_PASSWORD_CHECK_QUEUE: Final = 32
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS: Final = 100
"""Kafka's ``connection.failed.authentication.delay.ms`` default."""


@dataclass(slots=True)
class PasswordCheckStats:
    """Counted on the pool's threads under its lock."""

    completed: int = 0
    running: int = 0
    #: The most checks that ever ran at once: never above the thread count.
    peak_running: int = 0


class PasswordChecks:
    """A bounded pool for password checks; :meth:`close` at shutdown."""

    def __init__(
        self,
        threads: int = DEFAULT_PASSWORD_CHECK_THREADS,
        max_queued: int = DEFAULT_PASSWORD_CHECK_QUEUE,
    ) -> None:
        if threads < 1:
            raise ValueError(f"password_check_threads must be >= 1: {threads}")
        if max_queued < 0:
            raise ValueError(f"password_check_queue must be >= 0: {max_queued}")
        self.threads = threads
        self.max_queued = max_queued
        #: Checks submitted and not yet done (running or waiting); counted on the event loop.
        self.pending = 0
        #: The most ever pending at once (``threads + max_queued`` at most where doors check).
        self.peak_pending = 0
        self.stats = PasswordCheckStats()
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="kip714-password-check")

    @property
    def full(self) -> bool:
        """Whether a new check would wait behind ``max_queued`` others: refuse it instead."""
        return self.pending >= self.threads + self.max_queued

    def run(self, check: Callable[..., T], *args: object) -> asyncio.Future[T]:
        """Run ``check(*args)`` on the pool; cancelling the future drops a queued check."""
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, self._counted, check, *args)
        self.pending += 1
        self.peak_pending = max(self.peak_pending, self.pending)
        future.add_done_callback(self._done)
        return future

    def _done(self, _: asyncio.Future[T]) -> None:
        self.pending -= 1

    def _counted(self, check: Callable[..., T], *args: object) -> T:
        stats = self.stats
        with self._lock:
            stats.running += 1
            stats.peak_running = max(stats.peak_running, stats.running)
        try:
            return check(*args)
        finally:
            with self._lock:
                stats.running -= 1
                stats.completed += 1

    def close(self) -> None:
        """Drop queued checks; a running one finishes on its own (bounded: one hash)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


def dummy_hash(users: Mapping[str, PasswordHash]) -> PasswordHash:
    """A hash no password matches, as costly as the users' own (their highest iteration count)."""
    iterations = max((h.iterations for h in users.values()), default=DEFAULT_HASH_ITERATIONS)
    return PasswordHash(iterations, secrets.token_bytes(16), secrets.token_bytes(32))


def verify_plain_password(
    users: Mapping[str, PasswordHash], dummy: PasswordHash, username: str, password: str
) -> bool:
    """Whether ``password`` is ``username``'s, hashing once whether the user exists or not."""
    secret = users.get(username)
    matched = (secret if secret is not None else dummy).matches(password)
    return secret is not None and matched
