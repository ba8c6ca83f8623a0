"""The landing's worker processes: ordered requests, one reply each, one future per reply.

``serve_requests`` is a worker's side: its loop answers each request in
order. ``WorkerHandle`` is the event loop's side. Each worker gets one pipe.
Requests are pickled and written by a one-thread executor (so a full pipe
never blocks the loop, and requests keep their order); a reader thread per
worker receives the replies, which come back in request order, and resolves
the oldest pending future. A worker that dies fails every pending and later
request with ``WorkerFailedError``. ``call_in_process`` runs one call in a
fresh process and waits for it (the lake's periodic maintenance).

A worker's log records come back over its pipe (``("log", record)``, between
replies) and are handled by the server's logging, at the level the server's
root logger had when the worker started: a commit's warning or a
maintenance pass's INFO lines read as if the server had written them.

This module imports neither pyarrow nor pyiceberg: the serving process
imports it, and those belong to the workers (docs/architecture.md "Processes").
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import importlib
import logging
import logging.handlers
import multiprocessing
import os
import signal
import sys
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from multiprocessing.connection import Connection
    from multiprocessing.context import SpawnProcess

__all__ = ["WorkerFailedError", "WorkerHandle", "call_in_process", "serve_requests"]


class WorkerFailedError(Exception):
    """A worker process died or reported a failure; its generation cannot be committed."""


class WorkerHandle:
    """One worker process and its pipe.

    ``target(connection, config)`` is the process's main function (it calls
    ``serve_requests``). ``config`` is pickled to the process and must have
    a ``lane_id`` (it names the process and its threads).
    """

    def __init__(
        self,
        config: Any,
        target: Callable[[Connection, Any], None],
        name: str,
    ) -> None:
        index = getattr(config, "lane_id", 0)
        # spawn, not fork: the server runs threads (the log's writer, the
        # exporter hosts' readers), and forking a threaded process can copy a
        # held lock into the child.
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self.process: SpawnProcess = context.Process(
            target=_worker_entry,
            args=(target, child, config, logging.getLogger().getEffectiveLevel(), os.getpid()),
            name=f"{name}-w{index}",
            daemon=True,
        )
        self._child: Connection | None = child
        self._pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._sender = ThreadPoolExecutor(1, thread_name_prefix=f"{name}-send-w{index}")
        self._reader: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.failure: str | None = None

    def start(self) -> None:
        """Start the process and the reply reader (blocking: run it in a thread)."""
        self.process.start()
        if self._child is not None:
            self._child.close()  # only the worker holds its end, so its death is EOF here
            self._child = None
        self._reader = threading.Thread(
            target=self._read, name=f"{self.process.name}-replies", daemon=True
        )

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        if self._reader is not None and not self._reader.is_alive():
            self._reader.start()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def request(self, message: tuple[Any, ...]) -> asyncio.Future[Any]:
        """Queue ``message``; the future resolves with the worker's reply."""
        assert self._loop is not None, "attach() first"
        future: asyncio.Future[Any] = self._loop.create_future()
        if self.failure is not None:
            future.set_exception(WorkerFailedError(self.failure))
            return future
        self._pending.append(future)
        self._sender.submit(self._send, message)
        return future

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            self._conn.send(message)
        except (OSError, ValueError) as error:
            self._fail(f"sending to {self.process.name} failed: {error!r}")

    def _read(self) -> None:
        while True:
            try:
                reply = self._conn.recv()
            except (EOFError, OSError):
                code = self.process.exitcode
                self._fail(f"{self.process.name} exited (code {code})")
                return
            if reply[0] == "log":
                _handle(reply[1])
                continue
            if reply[0] == "error":
                self._resolve_next(error=f"{self.process.name} failed:\n{reply[1]}")
            else:
                self._resolve_next(result=reply)
            if reply[0] == "stopped":
                return

    def _resolve_next(self, result: Any = None, error: str | None = None) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def resolve() -> None:
            if not self._pending:
                return
            # Popped whatever its state: each request gets exactly one reply, in
            # order, so a reply whose awaiter was cancelled (a write given up at
            # shutdown) is consumed here and the next reply meets the next request.
            future = self._pending.popleft()
            if future.done():
                return
            if error is not None:
                future.set_exception(WorkerFailedError(error))
            else:
                future.set_result(result)

        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(resolve)

    def _fail(self, reason: str) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            self.failure = self.failure or reason
            return

        def fail_all() -> None:
            self.failure = self.failure or reason
            while self._pending:
                future = self._pending.popleft()
                if not future.done():
                    future.set_exception(WorkerFailedError(reason))

        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(fail_all)

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the worker to exit (it discards unwritten rows), then reap it."""
        if self.process.is_alive() and self.failure is None and self._loop is not None:
            with contextlib.suppress(WorkerFailedError, TimeoutError):
                await asyncio.wait_for(self.request(("stop",)), timeout_s)
        await asyncio.to_thread(self._reap, timeout_s)

    def _reap(self, timeout_s: float) -> None:
        self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        # The worker is gone, so the reader has seen EOF (or "stopped") and returns.
        if self._reader is not None and self._reader.is_alive():
            self._reader.join(5)
        self._sender.shutdown(wait=True)
        self._conn.close()
        self.process.close()


def serve_requests(
    conn: Connection,
    handlers: Mapping[str, Callable[[tuple[Any, ...]], tuple[Any, ...]]],
    poison: Callable[[str], None],
    cleanup: Callable[[], None],
    reads: frozenset[str] = frozenset(),
) -> None:
    """A worker process's loop: one reply per request, in order, until ``stop`` or EOF.

    A request that fails is answered ``("error", traceback)`` and poisons the
    worker: every later request but ``stop`` is refused, so work missing a
    batch is never committed. The kinds in ``reads`` hold no work of the
    worker's (reading a table, a commit of files already written): one that
    fails, say while the catalog is away, is answered the same way and
    poisons nothing, so the caller's retry can succeed once it is back.
    ``cleanup`` runs on ``stop`` and when the parent is gone (EOF):
    uncommitted work is discarded.
    """
    # The server handles SIGINT/SIGTERM and tells us when to stop; a Ctrl-C
    # sent to the whole process group must not kill us before the final write.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import pyarrow as pa  # noqa: PLC0415  (a worker's import, never the server's)

    # The system allocator hands freed batches back to the OS; mimalloc kept
    # about 40 MiB more resident here, for no measurable speed difference.
    pa.set_memory_pool(pa.system_memory_pool())
    poisoned: str | None = None
    try:
        while True:
            try:
                message: tuple[Any, ...] = conn.recv()
            except (EOFError, OSError):
                return  # the parent is gone
            kind = message[0]
            if kind == "stop":
                cleanup()
                _send(conn, ("stopped",))
                return
            try:
                if poisoned is not None:
                    raise RuntimeError(f"worker is poisoned: {poisoned}")
                if kind not in handlers:
                    raise ValueError(f"unknown request {kind!r}")
                reply = handlers[kind](message)
            except Exception:
                failure = traceback.format_exc(limit=8)
                if kind not in reads or poisoned is not None:
                    poisoned = poisoned or failure
                    poison(poisoned)
                    failure = poisoned
                reply = ("error", failure)
            _send(conn, reply)
    finally:
        cleanup()
        logging.getLogger().handlers.clear()
        conn.close()


def call_in_process(target: str, *args: Any, name: str, timeout_s: float = 10.0) -> Any:
    """``module:function(*args)`` run in a fresh spawned process; its result (blocking).

    For work that needs what the serving process must not load (pyiceberg
    for the lake's maintenance, every ``interval_s``): the process exits
    after the call, so what it loaded stays resident only meanwhile. The
    call is named by string because pickling a function imports its module
    here. ``args`` and the result must pickle without such imports too.
    The call runs to its end (a thread waiting here cannot be interrupted,
    and the work commits as it goes); ``timeout_s`` bounds only the exit.

    Raises:
        WorkerFailedError: The call raised (its traceback), or the process died.
    """
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    level = logging.getLogger().getEffectiveLevel()
    process = context.Process(
        target=_call_main, args=(sender, target, args, level, os.getpid()), name=name, daemon=True
    )
    process.start()
    sender.close()  # only the child holds it, so its death is EOF here
    try:
        try:
            reply = receiver.recv()
            while reply[0] == "log":
                _handle(reply[1])
                reply = receiver.recv()
        except EOFError:
            process.join(timeout_s)
            raise WorkerFailedError(f"{name} exited (code {process.exitcode})") from None
    finally:
        receiver.close()
        process.join(timeout_s)
        if process.is_alive():
            process.kill()
            process.join(5)
        process.close()
    if reply[0] == "error":
        raise WorkerFailedError(f"{name} failed:\n{reply[1]}")
    return reply[1]


def _call_main(
    conn: Connection, target: str, args: tuple[Any, ...], level: int, parent: int
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server tells its children when to stop
    _die_with(parent)
    _forward_logs(conn, level)
    try:
        module, _, function = target.partition(":")
        result = getattr(importlib.import_module(module), function)(*args)
        reply: tuple[Any, ...] = ("done", result)
    except Exception:
        reply = ("error", traceback.format_exc(limit=8))
    try:
        _send(conn, reply)
    finally:
        logging.getLogger().handlers.clear()
        conn.close()


#: A worker's pipe carries its replies and its log records (sent from any of its threads).
_send_lock = threading.Lock()


def _send(conn: Connection, message: tuple[Any, ...]) -> None:
    with _send_lock:
        conn.send(message)


class _PipeLogHandler(logging.handlers.QueueHandler):
    """Ships a worker's records, formatted (``QueueHandler.prepare``), to the server's logging."""

    def __init__(self, conn: Connection) -> None:
        super().__init__(None)  # type: ignore[arg-type]  # enqueue sends; no queue
        self._conn = conn

    def enqueue(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(OSError, ValueError):  # the server is gone: nobody to tell
            _send(self._conn, ("log", record))


def _forward_logs(conn: Connection, level: int) -> None:
    root = logging.getLogger()
    root.handlers[:] = [_PipeLogHandler(conn)]
    root.setLevel(level)


def _handle(record: logging.LogRecord) -> None:
    """A worker's record, handled by the server's logger of the same name (its level applies)."""
    logger = logging.getLogger(record.name)
    if logger.isEnabledFor(record.levelno):
        logger.handle(record)


def _worker_entry(
    target: Callable[[Connection, Any], None],
    conn: Connection,
    config: Any,
    level: int,
    parent: int,
) -> None:
    """A worker process's first call: it dies with the server, its logs go there; ``target``."""
    _die_with(parent)
    _forward_logs(conn, level)
    target(conn, config)


#: ``prctl(PR_SET_PDEATHSIG, …)``: Linux's signal to a process when its parent dies.
_PR_SET_PDEATHSIG: Final = 1


def _die_with(parent: int) -> None:
    """Be killed the moment the server process dies (Linux), rather than at the next request.

    A worker that outlived a SIGKILLed server could still run a commit it had
    been sent, while the restarted server reads the table to find where it
    stands: that commit would land after the position was read, and its
    pushes again with the replay. Elsewhere a worker exits at the next
    request it cannot read (EOF), as before. (The kernel signals when the
    *thread* that started the worker ends: a landing's lanes are started
    from the event loop's default pool, whose threads live until the loop
    closes, after the landing has stopped them; a pass's thread waits for it.)
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the server died before the call above
        os._exit(1)
