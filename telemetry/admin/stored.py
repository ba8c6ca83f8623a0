"""The admin plane's rules, run on what the metadata store reads back.

A change made through the admin APIs is validated before it is stored; a
record that reaches the store another way (written straight into the shared
topic by anyone with write access to it, or by an older version with looser
rules) is judged by the same rules when it is read: the stores call
:func:`check_stored_state` on each entity's state (``StateCheck``) and skip,
log and count what it refuses, so no record can stop a node following the
topic or starting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from telemetry.admin.client_metrics_alter import check_stored_client_metrics
from telemetry.admin.quota_alter import check_stored_quotas
from telemetry.admin.scram import credential_refusal
from telemetry.metastore import (
    ClientQuotaRecord,
    ConfigRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from telemetry.security import ScramMechanism

if TYPE_CHECKING:
    from telemetry.metastore import MetadataRecord

__all__ = ["StoredRecordError", "check_stored_state"]


class StoredRecordError(ValueError):
    """A stored state that no admin request would have produced."""


def check_stored_state(state: tuple[MetadataRecord, ...]) -> None:
    """Raise for the whole state of one entity (never empty) that the admin plane would refuse.

    Raises:
        InvalidRequestError, InvalidConfigError: the admin API's own refusal.
        StoredRecordError: a shape no admin request produces.
    """
    first = state[0]
    match first:
        case ConfigRecord():
            config: dict[str, str] = {}
            for record in state:
                if not isinstance(record, ConfigRecord) or record.value is None:
                    raise StoredRecordError(f"a subscription's state holds {record!r}")
                config[record.name] = record.value
            check_stored_client_metrics(first.resource_type, first.resource_name, config)
        case ClientQuotaRecord():
            values: dict[str, float] = {}
            for record in state:
                if not isinstance(record, ClientQuotaRecord) or record.remove:
                    raise StoredRecordError(f"a quota entity's state holds {record!r}")
                values[record.key] = record.value
            check_stored_quotas(first.entity, values)
        case UserScramCredentialRecord():
            if len(state) != 1:
                raise StoredRecordError(f"a SCRAM credential's state holds {len(state)} records")
            _check_credential(first)
        case RemoveUserScramCredentialRecord():
            raise StoredRecordError(f"a SCRAM credential's state holds {first!r}")


def _check_credential(record: UserScramCredentialRecord) -> None:
    refusal = credential_refusal(record.name, record.mechanism, record.iterations)
    if refusal is not None:
        raise StoredRecordError(f"SCRAM credential of {record.name!r}: {refusal[1]}")
    mechanism = ScramMechanism.by_id(record.mechanism)
    assert mechanism is not None  # checked by credential_refusal
    size = len(mechanism.hash(b""))
    if len(record.stored_key) != size or len(record.server_key) != size:
        raise StoredRecordError(
            f"SCRAM credential of {record.name!r}: keys of {len(record.stored_key)} and "
            f"{len(record.server_key)} bytes, {mechanism.mechanism_name} makes {size}"
        )
