"""Headless Chromium driven through the DevTools protocol (aiohttp's websocket client).

Why DevTools rather than ``--dump-dom`` with a script added to the page: the
report forbids scripts (its Content-Security-Policy), and the page measured
must be the page shipped. ``Runtime.evaluate`` runs in the page as DevTools
does, without changing it. Chromium binds its DevTools port on 127.0.0.1,
picks it itself (``--remote-debugging-port=0``) and writes it to
``DevToolsActivePort`` in its profile directory.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from pathlib import Path

START_TIMEOUT_S = 60.0
LOAD_TIMEOUT_S = 60.0


async def evaluate_in_page(
    url: str, expression: str, profile: Path, size: tuple[int, int] = (1280, 2000)
) -> Any:
    """Open ``url`` in a fresh headless Chromium of ``size`` and return ``expression``'s value."""
    binary = shutil.which("chromium")
    assert binary, "Debian's chromium package is needed (.ci/run installs it)"
    process = subprocess.Popen(
        [
            binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--force-device-scale-factor=1", f"--user-data-dir={profile}",
            f"--window-size={size[0]},{size[1]}", "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0", url,
        ],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        port = await _devtools_port(profile, process)
        async with aiohttp.ClientSession() as session:
            page = await _page_target(session, port, url)
            async with session.ws_connect(page, max_msg_size=64 * 1024 * 1024) as socket:
                calls = _Calls(socket)
                deadline = time.monotonic() + LOAD_TIMEOUT_S
                loaded = (
                    f"document.readyState === 'complete' && location.href === {json.dumps(url)}"
                )
                while not await calls.value(loaded):
                    assert time.monotonic() < deadline, "the page did not load"
                    await asyncio.sleep(0.1)
                return await calls.value(expression)
    finally:
        process.kill()
        process.wait(30)


async def _devtools_port(profile: Path, process: subprocess.Popen[bytes]) -> int:
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"chromium exited with {process.returncode}"
        if marker.exists() and (lines := marker.read_text().splitlines()):
            return int(lines[0])
        await asyncio.sleep(0.1)
    raise AssertionError("chromium opened no DevTools port")


async def _page_target(session: aiohttp.ClientSession, port: int, url: str) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        async with session.get(f"http://127.0.0.1:{port}/json/list") as answer:
            targets = await answer.json()
        for target in targets:
            if target.get("type") == "page" and target.get("url") == url:
                return str(target["webSocketDebuggerUrl"])
        await asyncio.sleep(0.1)
    raise AssertionError(f"no page target for {url}")


class _Calls:
    """Numbered DevTools calls on one websocket; events in between are skipped."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.next_id = 0

    async def value(self, expression: str) -> Any:
        self.next_id += 1
        call = {
            "id": self.next_id,
            "method": "Runtime.evaluate",
            "params": {"expression": expression, "returnByValue": True},
        }
        await self.socket.send_str(json.dumps(call))
        for _ in range(10_000):
            message = await asyncio.wait_for(self.socket.receive_json(), LOAD_TIMEOUT_S)
            if message.get("id") == self.next_id:
                result = message["result"]
                assert "exceptionDetails" not in result, result
                return result["result"].get("value")
        raise AssertionError("no answer to a DevTools call")


#: What the report tests measure in the page: its width, each chart's points, its sections.
MEASURE_REPORT = """(() => {
  const charts = [...document.querySelectorAll("svg.chart")].map((svg) => ({
    id: svg.id,
    title: svg.getAttribute("aria-label"),
    box: (({left, top, width, height}) => [left, top, width, height])(svg.getBoundingClientRect()),
    points: Math.max(
      0, ...[...svg.querySelectorAll("polyline")].map((p) => p.points.numberOfItems)),
  }));
  const order = [...document.querySelectorAll("h2")].map((h) => h.id);
  return {
    scrollWidth: document.documentElement.scrollWidth,
    charts,
    sections: order,
    inventory: document.querySelectorAll("#inventory table tr").length,
    states: Object.fromEntries([...document.querySelectorAll("#states tr")].slice(1).map(
      (row) => [row.cells[0].textContent, Number(row.cells[1].textContent.replace(/,/g, ""))])),
    clients: [...document.querySelectorAll("section.client")].length,
  };
})()"""
