"""Header versions per key and version: ``client_id`` stays a classic string in v2."""

from __future__ import annotations

import pytest

from telemetry.wire import Reader, is_flexible, request_header_version, response_header_version
from telemetry.wire.headers import (
    RequestHeader,
    read_request_header,
    read_response_header,
    write_request_header,
)
from telemetry.wire.primitives import Writer


@pytest.mark.parametrize(
    ("api_key", "version", "request_header", "response_header"),
    [
        (18, 0, 1, 0),
        (18, 2, 1, 0),
        (18, 3, 2, 0),  # flexible, yet the response header stays v0
        (18, 4, 2, 0),
        (3, 0, 1, 0),
        (3, 8, 1, 0),
        (3, 9, 2, 1),
        (3, 12, 2, 1),
        (71, 0, 2, 1),
        (72, 0, 2, 1),
        (0, 9, 1, 0),  # unknown to kip714: only the v1 prefix is ever read
    ],
)
def test_header_versions(
    api_key: int, version: int, request_header: int, response_header: int
) -> None:
    assert request_header_version(api_key, version) == request_header
    assert response_header_version(api_key, version) == response_header
    assert is_flexible(api_key, version) is (request_header == 2)


def test_v2_header_keeps_a_classic_client_id_then_tags() -> None:
    header = RequestHeader(api_key=72, api_version=0, correlation_id=4, client_id="ab")
    writer = Writer()
    write_request_header(writer, header)
    assert writer.getvalue().hex() == "00480000000000040002616200"
    # The same header with one unknown tag (7, two bytes) instead of none.
    reader = Reader(writer.getvalue()[:-1] + bytes.fromhex("01 07 02 ffff"))
    assert read_request_header(reader) == header
    reader.expect_end()


def test_v1_header_has_no_tag_section() -> None:
    header = RequestHeader(api_key=3, api_version=8, correlation_id=-1, client_id=None)
    writer = Writer()
    write_request_header(writer, header)
    assert writer.getvalue().hex() == "00030008ffffffffffff"


@pytest.mark.parametrize(("data", "header_version"), [("0000002a", 0), ("0000002a00", 1)])
def test_response_header(data: str, header_version: int) -> None:
    reader = Reader(bytes.fromhex(data))
    assert read_response_header(reader, header_version) == 42
    reader.expect_end()
