"""Run ``kip714 serve`` as a real subprocess on free loopback ports, for end-to-end tests."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from tests.telemetry.server_support import close_between_pushes

SERVING = re.compile(
    r"kafka=(?P<kh>[^ ]+):(?P<kp>\d+) advertised=\S+ http=(?P<hh>[^ ]+):(?P<hp>\d+)"
)
START_TIMEOUT_S = 120.0  # a bound for a start that hangs: a loaded machine takes long


class ServeProcess:
    """``kip714 serve`` with its stderr drained into ``lines`` by a thread."""

    def __init__(
        self, data_dir: Path, config: str | None = None, http_listen: str = "127.0.0.1:0"
    ) -> None:
        self.data_dir = data_dir
        self.http_listen = http_listen
        self.config_path: Path | None = None
        if config is not None:
            self.config_path = data_dir.parent / f"{data_dir.name}.toml"
            self.config_path.write_text(config)
        self.lines: list[str] = []
        self.process: subprocess.Popen[str] | None = None
        self.kafka: tuple[str, int] = ("", 0)
        self.http: tuple[str, int] = ("", 0)
        self._drainer: threading.Thread | None = None

    def start(self) -> ServeProcess:
        command = [
            sys.executable, "-m", "telemetry", "serve",
            "--kafka-listen", "127.0.0.1:0", "--http-listen", self.http_listen,
            "--data-dir", str(self.data_dir), "--log-format", "json",
        ]  # fmt: skip
        if self.config_path is not None:
            command += ["--config", str(self.config_path)]
        self.lines = []
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for line in list(self.lines):
                match = SERVING.search(line)
                if match:
                    self.kafka = (match["kh"], int(match["kp"]))
                    self.http = (match["hh"], int(match["hp"]))
                    return self
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self.kill()
        raise AssertionError("kip714 serve did not start:\n" + "\n".join(self.lines))

    def _drain(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    @property
    def bootstrap(self) -> str:
        return f"{self.kafka[0]}:{self.kafka[1]}"

    def events(self) -> list[dict[str, Any]]:
        parsed = []
        for line in self.lines:
            try:
                parsed.append(json.loads(line))
            except ValueError:
                continue
        return parsed

    def stop(self, timeout_s: float = 20.0) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            tail = "\n".join(list(self.lines)[-40:])
            raise AssertionError(
                f"kip714 serve did not stop within {timeout_s} s of SIGTERM; "
                f"its last lines:\n{tail}"
            ) from None
        self._release()
        return code

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._release()

    def _release(self) -> None:
        """Join the drain thread and close the pipe (unclosed pipes are errors in tests)."""
        if self._drainer is not None:
            self._drainer.join(10)
            self._drainer = None
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()


def run_clients(
    bootstrap: str,
    seconds: float,
    prefix: str,
    *,
    admin: bool = True,
    landed: Path | None = None,
    interval_ms: int = 0,
) -> None:
    """A producer, a consumer (and an admin client), polled for ``seconds``, then closed.

    Client ids are ``<prefix>-producer`` etc.; closing a client sends its
    terminating push. With ``landed`` (the JSONL landing's file) and the
    subscription's ``interval_ms``, each client is closed between two of its
    pushes, so that its terminating push is certain
    (:func:`tests.telemetry.server_support.close_between_pushes`); the admin
    client, which has no ``close``, by dropping the last reference to it.
    """
    common: dict[str, str | int | float | bool] = {
        "bootstrap.servers": bootstrap,
        "enable.sparse.connections": False,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 1000,
    }
    producer = Producer({**common, "client.id": f"{prefix}-producer"})
    consumer = Consumer(
        {**common, "client.id": f"{prefix}-consumer", "group.id": f"{prefix}-group"}
    )
    clients: list[Any] = [producer, consumer]
    if admin:
        clients.append(AdminClient({**common, "client.id": f"{prefix}-admin"}))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for client in clients:
            client.poll(0.05)
    producer.flush(2)
    if landed is None:
        consumer.close()
        del producer, clients
        return
    close_between_pushes(consumer.close, landed, f"{prefix}-consumer", interval_ms)
    close_between_pushes(producer.close, landed, f"{prefix}-producer", interval_ms)
    if admin:
        close_between_pushes(clients.clear, landed, f"{prefix}-admin", interval_ms)
    del producer, clients
