"""AlterClientQuotas / DescribeClientQuotas over the image: KRaft's validation, per-entity
errors, change-only records, aliases, and the describe filter's matching rules."""

from __future__ import annotations

import pytest

from telemetry.admin.quota_alter import (
    UnsupportedEntityTypeError,
    alter_client_quotas,
    describe_client_quotas,
)
from telemetry.errors import InvalidRequestError
from telemetry.metastore import ClientQuotaRecord, MetadataImage
from telemetry.wire.quota_messages import (
    AlterClientQuotasEntry,
    AlterClientQuotasResult,
    ComponentData,
    EntityData,
    QuotaMatchType,
    QuotaOp,
)


def _entity(*parts: tuple[str, str | None]) -> tuple[EntityData, ...]:
    return tuple(EntityData(entity_type=t, entity_name=n) for t, n in parts)


def _entry(entity: tuple[EntityData, ...], *ops: tuple[str, float, bool]) -> AlterClientQuotasEntry:
    return AlterClientQuotasEntry(
        entity=entity, ops=tuple(QuotaOp(key=k, value=v, remove=r) for k, v, r in ops)
    )


ALICE = _entity(("user", "alice"))
DEFAULT_USER = _entity(("user", None))


def test_set_records_once_and_aliases_producer_byte_rate() -> None:
    records, results = alter_client_quotas(
        MetadataImage(), [_entry(DEFAULT_USER, ("producer_byte_rate", 1024.0, False))]
    )
    assert records == (
        ClientQuotaRecord(entity=(("user", None),), key="push_byte_rate", value=1024.0),
    )
    assert results == (AlterClientQuotasResult(entity=DEFAULT_USER),)
    image = MetadataImage().apply(records)
    again, _ = alter_client_quotas(image, [_entry(DEFAULT_USER, ("push_byte_rate", 1024.0, False))])
    assert again == ()  # unchanged value: no record


def test_remove_of_a_present_key_only() -> None:
    image = MetadataImage().apply(
        [ClientQuotaRecord(entity=(("user", "alice"),), key="request_percentage", value=5.0)]
    )
    records, results = alter_client_quotas(
        image,
        [_entry(ALICE, ("request_percentage", 0.0, True), ("controller_mutation_rate", 0, True))],
    )
    assert records == (
        ClientQuotaRecord(entity=(("user", "alice"),), key="request_percentage", remove=True),
    )
    assert results[0].error_code == 0
    assert MetadataImage().apply([]).client_quotas == image.apply(records).client_quotas


def test_user_and_client_id_entity_and_ip_entity() -> None:
    both = _entity(("client-id", "app"), ("user", "alice"))
    records, results = alter_client_quotas(
        MetadataImage(),
        [
            _entry(both, ("request_percentage", 25.5, False)),
            _entry(_entity(("ip", "10.0.0.1")), ("connection_creation_rate", 20, False)),
            _entry(_entity(("ip", None)), ("connection_creation_rate", 5, False)),
            _entry(_entity(("ip", "::1")), ("connection_creation_rate", 1, False)),
        ],
    )
    assert [r.error_code for r in results] == [0, 0, 0, 0]
    image = MetadataImage().apply(records)
    assert image.client_quotas[(("client-id", "app"), ("user", "alice"))] == {
        "request_percentage": 25.5
    }
    assert image.ip_quotas == {
        "10.0.0.1": {"connection_creation_rate": 20},
        None: {"connection_creation_rate": 5},
        "::1": {"connection_creation_rate": 1},
    }


@pytest.mark.parametrize(
    ("entity", "op", "message"),
    [
        ((), ("request_percentage", 1.0), "Invalid empty client quota entity"),
        (
            _entity(("user", "a"), ("user", "b")),
            ("request_percentage", 1.0),
            "Invalid client quota entity, duplicate entity entry user",
        ),
        (
            _entity(("group", "g")),
            ("request_percentage", 1.0),
            "Unhandled client quota entity type: group",
        ),
        (_entity(("user", "")), ("request_percentage", 1.0), "Empty user not supported"),
        (
            _entity(("ip", "10.0.0.1"), ("user", "a")),
            ("connection_creation_rate", 1.0),
            "Invalid quota entity combination, IP entity shouldnot be combined with "
            "User or ClientId",
        ),
        (
            _entity(("ip", "not-an-ip")),
            ("connection_creation_rate", 1.0),
            "not-an-ip is not a valid IP or resolvable host.",
        ),
        (ALICE, ("consumer_byte_rate", 1.0), "Invalid configuration key consumer_byte_rate"),
        (
            ALICE,
            ("connection_creation_rate", 1.0),
            "Invalid configuration key connection_creation_rate",
        ),
        (
            _entity(("ip", None)),
            ("request_percentage", 1.0),
            "Invalid configuration key request_percentage",
        ),
        (ALICE, ("request_percentage", 0.0), "Quota request_percentage must be greater than 0"),
        (ALICE, ("push_byte_rate", -5.0), "Quota push_byte_rate must be greater than 0"),
        (ALICE, ("push_byte_rate", float("nan")), "Quota push_byte_rate must be greater than 0"),
        (ALICE, ("push_byte_rate", float("inf")), "Quota push_byte_rate must be greater than 0"),
        (ALICE, ("push_byte_rate", 10.5), "push_byte_rate cannot be a fractional value."),
        (
            ALICE,
            ("push_byte_rate", 2.0**64),
            "Proposed value for push_byte_rate is too large for a LONG.",
        ),
        (
            _entity(("ip", None)),
            ("connection_creation_rate", 2.0**31),
            "Proposed value for connection_creation_rate is too large for an INT.",
        ),
    ],
)
def test_entity_refusals_carry_kafkas_message(
    entity: tuple[EntityData, ...], op: tuple[str, float], message: str
) -> None:
    good = _entity(("client-id", "ok"))
    records, results = alter_client_quotas(
        MetadataImage(),
        [_entry(entity, (*op, False)), _entry(good, ("request_percentage", 3.0, False))],
    )
    assert results[0] == AlterClientQuotasResult(
        entity=entity, error_code=42, error_message=message
    )
    assert results[1] == AlterClientQuotasResult(entity=good)
    assert records == (  # the failing entity writes nothing, the other one still does
        ClientQuotaRecord(entity=(("client-id", "ok"),), key="request_percentage", value=3.0),
    )


def test_a_fraction_within_kafkas_epsilon_is_integral() -> None:
    records, results = alter_client_quotas(
        MetadataImage(), [_entry(ALICE, ("push_byte_rate", 1024.0000001, False))]
    )
    assert results[0].error_code == 0
    assert len(records) == 1


def test_duplicate_key_and_duplicate_entity_answer_as_kafka_does() -> None:
    records, results = alter_client_quotas(
        MetadataImage(),
        [
            _entry(ALICE, ("push_byte_rate", 10, False), ("producer_byte_rate", 20, False)),
            _entry(DEFAULT_USER, ("push_byte_rate", 10, False)),
            _entry(DEFAULT_USER, ("push_byte_rate", 30, False)),
        ],
    )
    text = "ClientQuotaEntity(entries={user=%s})"
    assert [(r.error_code, r.error_message) for r in results] == [
        (42, "Ignoring duplicate entity " + text % "alice"),
        (42, "Ignoring duplicate entity " + text % "None"),
    ]
    # Kafka keeps the first occurrence's records although it answers with an error.
    assert records == (ClientQuotaRecord(entity=(("user", None),), key="push_byte_rate", value=10),)


def _image() -> MetadataImage:
    def record(entity: tuple[tuple[str, str | None], ...]) -> ClientQuotaRecord:
        return ClientQuotaRecord(entity=entity, key="request_percentage", value=1.0)

    return MetadataImage().apply(
        [
            record((("user", "alice"),)),
            record((("user", None),)),
            record((("client-id", "app"), ("user", "alice"))),
            record((("client-id", "app"),)),
            record((("ip", "10.0.0.1"),)),
        ]
    )


def _names(entries: tuple[object, ...]) -> set[tuple[tuple[str, str | None], ...]]:
    found = set()
    for entry in entries:
        entity = entry.entity  # type: ignore[attr-defined]
        found.add(tuple((e.entity_type, e.entity_name) for e in entity))
    return found


def _c(entity_type: str, match_type: int, match: str | None = None) -> ComponentData:
    return ComponentData(entity_type=entity_type, match_type=match_type, match=match)


EXACT, DEFAULT, SPECIFIED = QuotaMatchType.EXACT, QuotaMatchType.DEFAULT, QuotaMatchType.SPECIFIED


def test_describe_exact_strict_and_not() -> None:
    image = _image()
    assert _names(describe_client_quotas(image, [_c("user", EXACT, "alice")], strict=True)) == {
        (("user", "alice"),)
    }
    assert _names(describe_client_quotas(image, [_c("user", EXACT, "alice")], strict=False)) == {
        (("user", "alice"),),
        (("client-id", "app"), ("user", "alice")),
    }


def test_describe_default_and_specified_which_also_matches_the_default() -> None:
    image = _image()
    assert _names(describe_client_quotas(image, [_c("user", DEFAULT)], strict=True)) == {
        (("user", None),)
    }
    assert _names(describe_client_quotas(image, [_c("user", SPECIFIED)], strict=True)) == {
        (("user", "alice"),),
        (("user", None),),
    }


def test_describe_everything_and_ip() -> None:
    image = _image()
    assert len(describe_client_quotas(image, [], strict=False)) == 5
    assert describe_client_quotas(image, [], strict=True) == ()
    assert _names(describe_client_quotas(image, [_c("ip", SPECIFIED)], strict=False)) == {
        (("ip", "10.0.0.1"),)
    }


@pytest.mark.parametrize(
    ("components", "error", "message"),
    [
        ([_c("", EXACT, "x")], InvalidRequestError, "Invalid empty entity type."),
        (
            [_c("user", EXACT, "a"), _c("user", DEFAULT)],
            InvalidRequestError,
            "Entity type user cannot appear more than once in the filter.",
        ),
        ([_c("group", SPECIFIED)], UnsupportedEntityTypeError, "Unsupported entity type group"),
        ([_c("user", EXACT)], InvalidRequestError, "Unexpected match type 0"),
        ([_c("user", DEFAULT, "a")], InvalidRequestError, "Unexpected match type 1"),
        ([_c("user", 7)], InvalidRequestError, "Unexpected match type 7"),
        (
            [_c("ip", SPECIFIED), _c("client-id", SPECIFIED)],
            InvalidRequestError,
            "Invalid entity filter component combination. IP filter component should not be "
            "used with user or clientId filter component.",
        ),
    ],
)
def test_describe_refusals(
    components: list[ComponentData], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        describe_client_quotas(_image(), components, strict=False)
    assert str(caught.value).startswith(message)
    if error is UnsupportedEntityTypeError:
        assert caught.value.error_code == 35  # type: ignore[attr-defined]
