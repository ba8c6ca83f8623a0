"""A connection's instance ids: one object per instance, the server's own when it handed it out."""

from __future__ import annotations

import os

from telemetry.core.client_uuid import Uuid
from telemetry.kafka.connection_state import MAX_INSTANCE_IDS, ConnectionState


def test_every_push_of_an_instance_gets_the_same_id_object() -> None:
    state = ConnectionState("c1", "127.0.0.1", 5000)
    raw = os.urandom(16)
    first = state.instance_id(raw)
    assert first == Uuid.from_bytes(raw)
    assert state.instance_id(bytes(raw)) is first


def test_an_id_handed_out_here_is_the_object_pushes_use() -> None:
    state = ConnectionState("c1", "127.0.0.1", 5000)
    handed_out = Uuid.random()
    state.remember_instance_id(handed_out)
    assert state.instance_id(handed_out.to_bytes()) is handed_out


def test_the_ids_kept_are_bounded_and_still_right_past_the_bound() -> None:
    state = ConnectionState("c1", "127.0.0.1", 5000)
    raws = [os.urandom(16) for _ in range(MAX_INSTANCE_IDS * 3)]
    for raw in raws:
        assert state.instance_id(raw) == Uuid.from_bytes(raw)
    assert state._instance_ids is not None
    assert len(state._instance_ids) <= MAX_INSTANCE_IDS
    assert all(state.instance_id(raw) == Uuid.from_bytes(raw) for raw in raws)
