"""The record format: round trip, and every kind of damage is caught."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from exporters.api import LoggedPush
from telemetry.ingest import PushContext
from telemetry.ingest import record as record_module
from telemetry.ingest.record import HEADER, FrameError, encode_frame
from tests.telemetry.ingest.support import (
    INSTANCE_ID,
    context,
    decoded_frame,
    encoded_frame,
    payload,
)


def test_round_trip_keeps_every_field() -> None:
    ctx = context(7, terminating=True)
    record = decoded_frame(encoded_frame(42, ctx, payload(7)), 42)
    assert record == LoggedPush(
        offset=42,
        client_instance_id=INSTANCE_ID,
        subscription_id=ctx.subscription_id,
        client_id="producer-7",
        client_software_name="confluent-kafka-python",
        client_software_version="2.6.0",
        client_source_address="10.0.0.7",
        client_source_port=40007,
        principal="User:alice",
        received_time_ms=1_700_000_000_007,
        push_interval_ms=5000,
        terminating=True,
        content_type="OTLP",
        payload=payload(7),
        received_bytes=len(payload(7)),  # stored as sent: uncompressed here
        decoded_bytes=len(payload(7)),
    )


def test_round_trip_of_absent_and_empty_values() -> None:
    ctx = PushContext(
        client_instance_id=INSTANCE_ID,
        subscription_id=-(2**31),
        received_time_ms=0,
        push_interval_ms=100,
        client_id="",
        principal="Üser:ünicode",
    )
    record = decoded_frame(encoded_frame(0, ctx, b""), 0)
    assert record.client_id == ""
    assert record.client_software_name is None
    assert record.client_source_address is None
    assert record.client_source_port is None
    assert record.principal == "Üser:ünicode"
    assert record.subscription_id == -(2**31)
    assert record.payload == b""
    assert record.terminating is False


def test_every_flipped_byte_is_detected() -> None:
    frame = encoded_frame(3, context(3), payload(3, 64))
    for i in range(HEADER.size, len(frame)):
        damaged = bytearray(frame)
        damaged[i] ^= 0x40
        with pytest.raises(FrameError):
            decoded_frame(bytes(damaged), 3)


def test_record_in_the_wrong_place_is_detected() -> None:
    with pytest.raises(FrameError, match="offset 5, expected 6"):
        decoded_frame(encoded_frame(5, context(5), payload(5)), 6)


def test_values_that_do_not_fit_are_refused() -> None:
    ctx = dataclasses.replace(context(1), client_source_port=2**40)
    with pytest.raises(ValueError, match="does not fit"):
        encode_frame(0, ctx, b"")


def test_strings_encoded_once_per_client_still_round_trip_past_the_cache_bound() -> None:
    # More distinct clients than the encoded-strings cache keeps, each twice:
    # every record decodes to its own strings, cached or not.
    clients = record_module._ENCODED_STRINGS.max_entries + 50
    for round_ in range(2):
        for seq in range(0, clients, 97):
            ctx = dataclasses.replace(context(seq), client_id=f"client-{seq}-é")
            record = decoded_frame(encoded_frame(seq + round_, ctx, payload(seq)), seq + round_)
            assert record.client_id == f"client-{seq}-é"
            assert record.client_source_address == ctx.client_source_address
    for seq in range(clients):
        record_module._ENCODED_STRINGS.get((f"i{seq}", "OTLP", None, None, None, None, None, None))
    assert len(record_module._ENCODED_STRINGS.entries) <= record_module._ENCODED_STRINGS.max_entries


def test_a_push_context_copies_and_pickles_field_for_field() -> None:
    context = PushContext(
        client_instance_id="AAAAAAAAAAEAAAAAAAAAAg",
        subscription_id=7,
        received_time_ms=1_700_000_000_000,
        push_interval_ms=5000,
        terminating=True,
        client_id="orders",
        client_source_address="192.0.2.1",
        client_source_port=40000,
        principal="User:alice",
    )
    for twin in (copy.copy(context), copy.deepcopy(context), pickle.loads(pickle.dumps(context))):
        assert twin == context
        assert twin is not context
