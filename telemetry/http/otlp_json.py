"""OTLP/JSON: the protobuf JSON mapping with the OTLP specification's deviations.

``google.protobuf.json_format`` does the mapping (lowerCamelCase keys, the
original field names too, 64-bit integers as strings or numbers, enums as
integers or names). What OTLP changes on top (OTLP 1.x, "JSON Protobuf
Encoding"):

* ``traceId`` and ``spanId`` (in metrics: exemplars) are hex strings, not
  base64; they are rewritten to base64 before parsing.
* Unknown fields are ignored, not an error, so a newer sender's fields do
  not make a request fail.

Responses are written the same way (``partialSuccess.rejectedDataPoints``
comes out as a string, which the mapping allows).
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any, Final

from google.protobuf import json_format

from telemetry.http.otlp_wire import ResourceBoundError

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["OtlpJsonError", "message_to_json", "parse_json"]

_HEX_ID_FIELDS: Final = frozenset({"traceId", "spanId", "trace_id", "span_id"})
_EXEMPLARS: Final = ("exemplars",)
_POINT_LISTS: Final = ("gauge", "sum", "histogram", "exponentialHistogram",
                       "exponential_histogram", "summary")  # fmt: skip


class OtlpJsonError(ValueError):
    """The body is not an OTLP/JSON encoding of the expected message."""


def _hex_ids_to_base64(exemplar: dict[str, Any]) -> None:
    for key in _HEX_ID_FIELDS.intersection(exemplar):
        value = exemplar[key]
        if not isinstance(value, str):
            raise OtlpJsonError(f"{key} must be a hex string")
        try:
            exemplar[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
        except ValueError as error:
            raise OtlpJsonError(f"{key} is not hex: {error}") from error


def _walk(document: object, path: tuple[str, ...]) -> list[dict[str, Any]]:
    """The objects found by following ``path`` (each step a key whose value is a list)."""
    level: list[Any] = [document]
    for key in path:
        following: list[Any] = []
        for node in level:
            if isinstance(node, dict):
                value = node.get(key)
                if isinstance(value, list):
                    following.extend(value)
                elif isinstance(value, dict):
                    following.append(value)
        level = following
    return [node for node in level if isinstance(node, dict)]


def _rewrite_exemplar_ids(document: object) -> None:
    """Exemplars sit at resourceMetrics[].scopeMetrics[].metrics[].<type>.dataPoints[]."""
    for resource_key, scope_key in (("resourceMetrics", "scopeMetrics"),
                                    ("resource_metrics", "scope_metrics")):  # fmt: skip
        for metric in _walk(document, (resource_key, scope_key, "metrics")):
            for kind in _POINT_LISTS:
                for points_key in ("dataPoints", "data_points"):
                    for point in _walk(metric, (kind, points_key)):
                        for exemplar in _walk(point, _EXEMPLARS):
                            _hex_ids_to_base64(exemplar)


def _check_counts(document: dict[str, Any], max_resources: int, max_scopes: int | None) -> None:
    for resources_key, scopes_key in (("resourceMetrics", "scopeMetrics"),
                                      ("resource_metrics", "scope_metrics")):  # fmt: skip
        resources = document.get(resources_key)
        if not isinstance(resources, list):
            continue
        if len(resources) > max_resources:
            raise ResourceBoundError(
                "max_resources_per_request",
                max_resources,
                f"more than {max_resources} resources in one request",
            )
        if max_scopes is None:
            continue
        for resource in resources:
            scopes = resource.get(scopes_key) if isinstance(resource, dict) else None
            if isinstance(scopes, list) and len(scopes) > max_scopes:
                raise ResourceBoundError(
                    "max_scopes_per_resource",
                    max_scopes,
                    f"more than {max_scopes} scopes in one resource",
                )


def parse_json(
    body: bytes,
    message: Message,
    max_resources: int | None = None,
    max_scopes: int | None = None,
) -> None:
    """Fill ``message`` from an OTLP/JSON ``body``.

    A request of more than ``max_resources`` resources, or a resource of
    more than ``max_scopes`` scopes, is refused before it is mapped to
    protobuf (the mapping is Python, a few µs per object).

    Raises:
        OtlpJsonError: not UTF-8 JSON, not an object, or not the message's shape.
        ResourceBoundError: more than ``max_resources`` resources or ``max_scopes`` scopes.
    """
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise OtlpJsonError(f"not JSON: {error}") from error
    if not isinstance(document, dict):
        raise OtlpJsonError("an OTLP/JSON request is a JSON object")
    if max_resources is not None:
        _check_counts(document, max_resources, max_scopes)
    _rewrite_exemplar_ids(document)
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as error:
        raise OtlpJsonError(str(error)) from error


def message_to_json(message: Message) -> bytes:
    """The OTLP/JSON encoding of a response or ``google.rpc.Status`` message."""
    text: str = json_format.MessageToJson(message, indent=None)
    return text.encode("utf-8")
