"""A real HTTP server in a thread that takes OTLP/HTTP requests, for the otlp exporter's tests.

It answers each POST with the next scripted status (then 200), records what
it received (decompressed, decoded), and can be asked for ``Retry-After``.
With ``refuse_client_id`` it answers 400 to any request holding a resource
of that ``kafka.client.id``, as a backend refuses one bad push in a batch.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)


@dataclass
class Answer:
    status: int = 200
    retry_after: str | None = None
    rejected_points: int = 0


@dataclass
class Received:
    headers: dict[str, str]
    request: ExportMetricsServiceRequest


@dataclass
class OtlpSink:
    """``with OtlpSink() as sink``; ``sink.url`` is its ``/v1/metrics``."""

    script: list[Answer] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    attempts: int = 0
    refuse_client_id: str | None = None
    #: How many resources each request carried, answered or not, in arrival order.
    request_sizes: list[int] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1/metrics"

    def __enter__(self) -> OtlpSink:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportMetricsServiceRequest()
                request.ParseFromString(body)
                with sink._lock:
                    sink.attempts += 1
                    sink.request_sizes.append(len(request.resource_metrics))
                    answer = sink.script.pop(0) if sink.script else Answer()
                    if answer.status == 200 and sink._refused(request):
                        answer = Answer(400)
                    if answer.status == 200:
                        sink.received.append(Received(dict(self.headers.items()), request))
                response = ExportMetricsServiceResponse()
                if answer.rejected_points:
                    response.partial_success.rejected_data_points = answer.rejected_points
                    response.partial_success.error_message = "too old"
                data = response.SerializeToString()
                self.send_response(answer.status)
                if answer.retry_after is not None:
                    self.send_header("Retry-After", answer.retry_after)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def _refused(self, request: ExportMetricsServiceRequest) -> bool:
        return self.refuse_client_id is not None and any(
            kv.key == "kafka.client.id" and kv.value.string_value == self.refuse_client_id
            for rm in request.resource_metrics
            for kv in rm.resource.attributes
        )

    def resource_attributes(self) -> list[dict[str, Any]]:
        """Each received resource's attributes, as plain values, in arrival order."""
        found = []
        with self._lock:
            for received in self.received:
                for rm in received.request.resource_metrics:
                    attributes = rm.resource.attributes
                    found.append({kv.key: _plain(kv.value) for kv in attributes})
        return found


def _plain(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value") or "string_value")
