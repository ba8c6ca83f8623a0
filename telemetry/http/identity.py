"""Who an OTLP sender is, in KIP-714's terms, derived from its resource attributes.

An OpenTelemetry SDK has no KIP-714 client instance id, client id or
ApiVersions software name, yet every landed row carries them. The rule
(stable: the same resource from the same place always gets the same
identity, across requests and server restarts):

* ``client_id`` = ``service.name`` (``None`` when absent).
* ``client_software_name`` = ``telemetry.sdk.name``, joined with
  ``telemetry.sdk.language`` by ``-`` when both are present
  (``opentelemetry-python``); ``client_software_version`` =
  ``telemetry.sdk.version``. They name the sending library, as ApiVersions
  does for a Kafka client (``service.version`` is the application's, and
  stays in ``resource_attributes``).
* ``client_instance_id`` = UUIDv5 in :data:`OTLP_INSTANCE_NAMESPACE` of
  ``service.namespace``, ``service.name`` and ``service.instance.id`` joined
  by NUL; when ``service.instance.id`` is absent, of ``service.namespace``,
  ``service.name`` and the source address instead (marked apart, so the two
  forms never collide). The semantic conventions make
  ``service.instance.id`` unique within namespace and name, so the id is
  per process for SDKs that set it (the Python SDK does). An id whose text
  form would start with ``-`` (Kafka never hands those out) is re-derived
  with a counter appended, so the rule stays deterministic.
* ``principal`` is the connection's (:mod:`telemetry.http.principal`: the
  client certificate's subject with mTLS, else ``User:ANONYMOUS``); source
  address and port are the connection's.
"""

from __future__ import annotations

import hashlib
import itertools
import sys
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from telemetry.core.client_uuid import Uuid

if TYPE_CHECKING:
    from collections.abc import Iterable

    from opentelemetry.proto.common.v1.common_pb2 import KeyValue

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ENTRIES",
    "OTLP_INSTANCE_NAMESPACE",
    "IdentityCache",
    "InvalidResourceError",
    "OtlpIdentity",
    "derive_identity",
    "entry_bytes",
]

#: The cache's bounds: entries, and bytes (``[telemetry] identity_cache_max_bytes``).
DEFAULT_MAX_ENTRIES: Final = 4096
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
#: One entry besides its strings: the table's slot, the 32-byte digest key, the
#: (identity, size) tuple, the identity and its Uuid; measured with tracemalloc.
ENTRY_OVERHEAD_BYTES: Final = 640

#: The UUIDv5 namespace of OTLP client instance ids: ``uuid5(NAMESPACE_URL, "urn:kip714:otlp")``.
OTLP_INSTANCE_NAMESPACE: Final = uuid.uuid5(uuid.NAMESPACE_URL, "urn:kip714:otlp")

_WANTED: Final = frozenset(
    {
        "service.name",
        "service.namespace",
        "service.instance.id",
        "telemetry.sdk.name",
        "telemetry.sdk.language",
        "telemetry.sdk.version",
    }
)


@dataclass(frozen=True, slots=True)
class OtlpIdentity:
    """The KIP-714 identity of one OTLP resource, as it lands."""

    client_instance_id: Uuid
    client_id: str | None
    client_software_name: str | None
    client_software_version: str | None


def _string_attributes(attributes: Iterable[KeyValue]) -> dict[str, str]:
    found: dict[str, str] = {}
    for attribute in attributes:
        if attribute.key in _WANTED and attribute.value.WhichOneof("value") == "string_value":
            found[attribute.key] = attribute.value.string_value
    return found


def _instance_id(name: str) -> Uuid:
    for attempt in itertools.count():
        seed = name if attempt == 0 else f"{name}\x00{attempt}"
        candidate = Uuid.from_bytes(uuid.uuid5(OTLP_INSTANCE_NAMESPACE, seed).bytes)
        if not str(candidate).startswith("-"):
            return candidate
    raise AssertionError("unreachable")  # pragma: no cover


def derive_identity(attributes: Iterable[KeyValue], source_address: str) -> OtlpIdentity:
    """The identity of the resource with ``attributes``, sent from ``source_address``."""
    found = _string_attributes(attributes)
    namespace = found.get("service.namespace", "")
    service = found.get("service.name")
    instance = found.get("service.instance.id")
    if instance is not None:
        seed = "\x00".join(("service.instance.id", namespace, service or "", instance))
    else:
        seed = "\x00".join(("source.address", namespace, service or "", source_address))
    sdk = found.get("telemetry.sdk.name")
    language = found.get("telemetry.sdk.language")
    software = f"{sdk}-{language}" if sdk and language else sdk or None
    return OtlpIdentity(
        client_instance_id=_instance_id(seed),
        client_id=service,
        client_software_name=software,
        client_software_version=found.get("telemetry.sdk.version"),
    )


class InvalidResourceError(Exception):
    """A resource's encoding does not decode."""


class IdentityCache:
    """:func:`derive_identity` memoised per (resource encoding, source address).

    A sender repeats its resource, byte for byte, on every request: a digest
    of the encoding as sent and the address is the key, so a request whose
    identity is cached decodes nothing (deriving costs a decode, a pass over
    the attributes and a SHA-1). The key is a BLAKE2b digest, not the
    encoding: 150 requests of one 15 MiB resource each held 2.4 GiB as keys.
    Only an encoding that decoded is cached. Bounded by entries and by the
    bytes they hold (the digest, the identity's strings and the objects around
    them, :func:`entry_bytes`): the least recently used go
    first, and an identity larger than the whole budget is not kept.

    The OTLP route's decoding threads and the event loop both look up and
    add: every access to the table is under one lock, never held while an
    identity is derived.
    """

    def __init__(self, maxsize: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES):
        self._maxsize = maxsize
        self._max_bytes = max_bytes
        self._bytes = 0
        self._lock = threading.Lock()
        # OrderedDict's moves are C: cachetools' LRUCache is Python code on every request.
        self._cache: OrderedDict[bytes, tuple[OtlpIdentity, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def held_bytes(self) -> int:
        """The bytes the cached entries hold, by :meth:`entry_bytes`."""
        return self._bytes

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    def holds(self, resource: bytes, source_address: str) -> bool:
        """Whether the identity of ``resource`` from ``source_address`` is cached (no reorder)."""
        return _key(resource, source_address) in self._cache

    def cached(self, resource: bytes, source_address: str) -> OtlpIdentity | None:
        """The cached identity of ``resource`` from ``source_address``, derived by nobody now."""
        key = _key(resource, source_address)
        with self._lock:
            found = self._cache.get(key)
            if found is None:
                return None
            self._cache.move_to_end(key)
        return found[0]

    def identity(self, resource: bytes, source_address: str) -> OtlpIdentity:
        """The identity of the encoded ``Resource`` sent from ``source_address``.

        Raises:
            InvalidResourceError: ``resource`` does not decode.
        """
        key = _key(resource, source_address)
        cache = self._cache
        with self._lock:
            found = cache.get(key)
            if found is not None:
                cache.move_to_end(key)
                return found[0]
        identity = derive_identity(_decoded(resource).attributes, source_address)
        size = entry_bytes(identity)
        if size > self._max_bytes:
            return identity
        with self._lock:
            if key not in cache:
                cache[key] = (identity, size)
                self._bytes += size
                while len(cache) > self._maxsize or self._bytes > self._max_bytes:
                    _, (_, dropped) = cache.popitem(last=False)
                    self._bytes -= dropped
        return identity


def entry_bytes(identity: OtlpIdentity) -> int:
    """What one cached identity holds: its strings, and the rest measured as a constant."""
    size = ENTRY_OVERHEAD_BYTES
    for text in (
        identity.client_id,
        identity.client_software_name,
        identity.client_software_version,
    ):
        if text is not None:
            size += sys.getsizeof(text)
    return size


def _key(resource: bytes, source_address: str) -> bytes:
    """A digest of the address (its length first, so the parts cannot run together), resource."""
    address = source_address.encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(len(address).to_bytes(4, "big"), digest_size=32)
    digest.update(address)
    digest.update(resource)
    return digest.digest()


def _decoded(resource: bytes) -> Resource:
    decoded = Resource()
    try:
        decoded.ParseFromString(resource)
    except Exception as undecodable:  # upb raises DecodeError, deep nesting included
        raise InvalidResourceError(str(undecodable)) from None
    return decoded
