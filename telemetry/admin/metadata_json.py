"""``GET /admin/metadata``: the records this node's image adds up to, for comparing nodes.

With a shared store every node that has read the topic to the same offset
shows the same records; a SCRAM credential is shown by a fingerprint of its
salt and keys, never the keys.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from quotas import DEFAULT
from telemetry.metastore import ClientQuotaRecord, ConfigRecord, UserScramCredentialRecord
from telemetry.security.scram import ScramMechanism

if TYPE_CHECKING:
    from telemetry.metastore.backend import MetadataBackend
    from telemetry.metastore.records import MetadataRecord


def record_json(record: MetadataRecord) -> dict[str, Any]:
    match record:
        case ConfigRecord():
            return {
                "type": "config",
                "resource_type": record.resource_type,
                "resource_name": record.resource_name,
                "name": record.name,
                "value": record.value,
            }
        case ClientQuotaRecord():
            return {
                "type": "client_quota",
                "entity": {kind: DEFAULT if name is None else name for kind, name in record.entity},
                "key": record.key,
                "value": record.value,
            }
        case UserScramCredentialRecord():
            mechanism = ScramMechanism.by_id(record.mechanism)
            digest = hashlib.sha256(record.salt + record.stored_key + record.server_key)
            return {
                "type": "scram_credential",
                "user": record.name,
                "mechanism": mechanism.mechanism_name if mechanism else record.mechanism,
                "iterations": record.iterations,
                "fingerprint": digest.hexdigest()[:32],
            }
    raise ValueError(f"an image holds no {type(record).__name__}")


def metadata_json(store: MetadataBackend) -> dict[str, Any]:
    image = store.image  # one value: the records and the offset agree
    return {
        "store": store.location,
        "next_offset": store.next_offset,
        "records": [record_json(record) for record in image.to_records()],
    }
