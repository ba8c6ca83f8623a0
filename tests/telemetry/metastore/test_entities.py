"""The metadata topic's messages: replayed in order, or compacted first, they rebuild the image."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.metastore import (
    ClientQuotaRecord,
    ConfigRecord,
    MetadataImage,
    MetadataRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from telemetry.metastore.entities import (
    ConfigEntity,
    QuotaEntityKey,
    ScramEntity,
    decode_key,
    decode_value,
    encode_key,
    image_messages,
    messages_for,
    replacing,
)
from telemetry.metastore.records import RecordFormatError, encode_batch

NAMES = st.sampled_from(["a", "b", 'ü,"x'])
KEYS = st.sampled_from(["metrics", "interval.ms", "match"])
QUOTA_ENTITIES = st.sampled_from(
    [(("user", "alice"),), (("user", None),), (("client-id", "app"), ("user", "alice"))]
)


def _scram(user: str, salt: bytes) -> UserScramCredentialRecord:
    return UserScramCredentialRecord(
        name=user, mechanism=1, salt=salt, stored_key=b"s" * 32, server_key=b"k" * 32,
        iterations=4096,
    )  # fmt: skip


RECORDS: st.SearchStrategy[MetadataRecord] = st.one_of(
    st.builds(
        lambda name, key, value: ConfigRecord(
            resource_type=16, resource_name=name, name=key, value=value
        ),
        NAMES,
        KEYS,
        st.one_of(st.none(), st.sampled_from(["1000", "*", ""])),
    ),
    st.builds(
        lambda entity, key, value, remove: ClientQuotaRecord(
            entity=entity, key=key, value=value, remove=remove
        ),
        QUOTA_ENTITIES,
        st.sampled_from(["push_byte_rate", "request_percentage"]),
        st.sampled_from([1.0, 2048.0]),
        st.booleans(),
    ),
    st.builds(_scram, st.sampled_from(["carol", "dave"]), st.binary(min_size=1, max_size=4)),
    st.builds(
        lambda user: RemoveUserScramCredentialRecord(name=user, mechanism=1),
        st.sampled_from(["carol", "dave"]),
    ),
)


def replay(messages: list[tuple[bytes, bytes | None]]) -> MetadataImage:
    """What a node does with the topic: each message replaces its entity's state."""
    image = MetadataImage()
    for key, value in messages:
        entity = decode_key(key)
        image = image.apply(replacing(image, entity, decode_value(entity, value)))
    return image


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(RECORDS, min_size=1, max_size=5), max_size=8))
def test_the_topic_replayed_or_compacted_is_the_image_the_records_make(
    requests: list[list[MetadataRecord]],
) -> None:
    image = MetadataImage()
    topic: list[tuple[bytes, bytes | None]] = []
    for records in requests:
        topic.extend(messages_for(image, records))
        image = image.apply(records)
    assert replay(topic) == image
    compacted = dict(topic)  # the last message of each key, as compaction keeps it
    assert replay(list(compacted.items())) == image
    # and without the tombstones, which compaction eventually drops too
    assert replay([(k, v) for k, v in compacted.items() if v is not None]) == image
    assert replay(image_messages(image)) == image


def test_one_request_on_one_subscription_is_one_message_with_every_key() -> None:
    image = MetadataImage().apply(
        [ConfigRecord(resource_type=16, resource_name="s", name="match", value="client_id=a")]
    )
    messages = messages_for(
        image,
        [
            ConfigRecord(resource_type=16, resource_name="s", name="metrics", value="*"),
            ConfigRecord(resource_type=16, resource_name="s", name="interval.ms", value="1000"),
            ClientQuotaRecord(entity=(("user", "bob"),), key="push_byte_rate", value=10.0),
        ],
    )
    assert [key for key, _ in messages] == [
        b'["config",16,"s"]',
        b'["quota",[["user","bob"]]]',
    ]
    assert decode_value(ConfigEntity(16, "s"), messages[0][1]) == (
        ConfigRecord(resource_type=16, resource_name="s", name="interval.ms", value="1000"),
        ConfigRecord(resource_type=16, resource_name="s", name="match", value="client_id=a"),
        ConfigRecord(resource_type=16, resource_name="s", name="metrics", value="*"),
    )


def test_removing_the_last_key_is_a_tombstone() -> None:
    image = MetadataImage().apply([_scram("carol", b"x")])
    [(key, value)] = messages_for(
        image, [RemoveUserScramCredentialRecord(name="carol", mechanism=1)]
    )
    assert (key, value) == (b'["scram","carol",1]', None)
    assert replay([(key, value)]) == MetadataImage()


def test_keys_round_trip_and_name_the_default_entity_as_null() -> None:
    for entity in (
        ConfigEntity(16, 'a "b"'),
        QuotaEntityKey((("client-id", "x"), ("user", None))),
        ScramEntity("ü", 2),
    ):
        assert decode_key(encode_key(entity)) == entity
    assert encode_key(QuotaEntityKey((("user", None),))) == b'["quota",[["user",null]]]'


@pytest.mark.parametrize(
    "key",
    [b"", b"not json", b'["config","16","a"]', b'["quota",[["user"]]]', b'["other",1]'],
)
def test_a_key_kip714_does_not_write_is_refused(key: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_key(key)


def test_a_value_that_names_another_entity_or_deletes_is_refused() -> None:
    other = encode_batch(
        0, (ConfigRecord(resource_type=16, resource_name="b", name="metrics", value="*"),)
    )
    with pytest.raises(RecordFormatError, match="holds"):
        decode_value(ConfigEntity(16, "a"), other)
    deleting = encode_batch(
        0, (ConfigRecord(resource_type=16, resource_name="a", name="metrics", value=None),)
    )
    with pytest.raises(RecordFormatError, match="holds"):
        decode_value(ConfigEntity(16, "a"), deleting)
    with pytest.raises(RecordFormatError, match="one frame"):
        decode_value(ConfigEntity(16, "a"), other[:-1])
