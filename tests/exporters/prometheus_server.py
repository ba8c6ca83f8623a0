"""A real Prometheus (Debian's package, installed by ``.ci/run``) for the exporter's tests."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

__all__ = ["PrometheusServer", "get_text", "query", "wait_for"]

PROMETHEUS_AT = re.compile(r'msg="Listening on" address=(\S+)')


def wait_for(find: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = find()
        if found:
            return found
        time.sleep(0.2)
    return find()


def get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


def query(prometheus: str, promql: str) -> list[dict[str, Any]]:
    answer = json.loads(
        get_text(f"http://{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    )
    assert answer["status"] == "success"
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


class PrometheusServer:
    """Debian's ``prometheus`` on loopback, on a temporary TSDB, with the configuration given."""

    def __init__(self, tmp_path: Path, config_text: str) -> None:
        binary = shutil.which("prometheus")
        assert binary, "Debian's prometheus package is needed (.ci/run installs it)"
        config = tmp_path / "prometheus.yml"
        config.write_text(config_text)
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                "--web.listen-address=127.0.0.1:0",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    def address(self) -> str:
        def find() -> str | None:
            for line in list(self.lines):
                match = PROMETHEUS_AT.search(line)
                if match:
                    return match[1]
            return None

        address: str | None = wait_for(find)
        assert address, "".join(self.lines)
        return address

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self._drainer.join(10)
        assert self.process.stderr is not None
        self.process.stderr.close()
