"""Who is on the other end of one Kafka connection: what KIP-714 identifies a client by.

Kept apart from the connection's framing and flow control
(``telemetry.kafka.connection``): the handlers, the authenticator and the
authorizer read and change this state; only the listener drives the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from telemetry.core.client_instance import RequestContext
from telemetry.core.client_uuid import Uuid
from telemetry.enforcement import ANONYMOUS_USER, ClientEntity

if TYPE_CHECKING:
    from telemetry.enforcement import EntitySensors
    from telemetry.security.sasl_session import SaslSession

__all__ = ["MAX_INSTANCE_IDS", "ConnectionState"]

#: Instance ids a connection keeps as objects (librdkafka pushes one per connection).
MAX_INSTANCE_IDS = 64

_NO_CLIENT_ID = ClientEntity(ANONYMOUS_USER, "")


@dataclass(slots=True)
class ConnectionState:
    """Who is on the other end: what KIP-714 identifies a client instance by."""

    connection_id: str
    address: str
    port: int
    client_id: str = ""
    software_name: str | None = None
    software_version: str | None = None
    _context: RequestContext | None = None
    #: Who the quotas charge: User:ANONYMOUS until SASL or a client certificate says otherwise.
    entity: ClientEntity = _NO_CLIENT_ID
    #: The principal's name (``alice`` for ``User:alice``): the quota user entity.
    user: str = ANONYMOUS_USER
    #: The SASL state when the listener has SASL enabled.
    sasl: SaslSession | None = None
    #: SASL must complete before anything but ApiVersions and SASL is served.
    authentication_required: bool = False
    #: Set with a response after which the connection closes (a failed SASL step).
    closing: str | None = None
    #: The quota sensors of ``entity``, resolved once (``ClientQuotas.sensors``).
    quota_sensors: EntitySensors | None = None
    #: The instance ids this connection used, by their 16 wire bytes: see :meth:`instance_id`.
    _instance_ids: dict[bytes, Uuid] | None = None

    @property
    def principal(self) -> str:
        return f"User:{self.user}"

    @property
    def user_is_anonymous(self) -> bool:
        return self.user == ANONYMOUS_USER

    def identify(self, client_id: str) -> None:
        if client_id != self.client_id:
            self.client_id = client_id
            self.entity = ClientEntity(self.user, client_id)
            self._context = None

    def authenticate(self, user: str) -> None:
        """The principal is now ``User:<user>``: quotas, context and landing follow it."""
        if user != self.user:
            self.user = user
            self.entity = ClientEntity(user, self.client_id)
            self._context = None

    def software(self, name: str, version: str) -> None:
        self.software_name = name
        self.software_version = version
        self._context = None

    def instance_id(self, raw: bytes) -> Uuid:
        """The ``Uuid`` of 16 wire bytes, the same object for every push of an instance here.

        The manager's maps then find it by identity, without comparing ids,
        and it is built once per instance, not per push. At most
        :data:`MAX_INSTANCE_IDS` are kept (a connection serves a few clients).
        """
        known = self._instance_ids
        if known is None:
            known = self._instance_ids = {}
        uuid = known.get(raw)
        if uuid is None:
            uuid = Uuid.from_bytes(raw)
            self._remember(raw, uuid)
        return uuid

    def remember_instance_id(self, uuid: Uuid) -> None:
        """An id the server handed out here: its own object is the one pushes will use."""
        if self._instance_ids is None:
            self._instance_ids = {}
        self._remember(uuid.to_bytes(), uuid)

    def _remember(self, raw: bytes, uuid: Uuid) -> None:
        known = self._instance_ids
        assert known is not None
        if len(known) >= MAX_INSTANCE_IDS:
            known.clear()
        known[raw] = uuid

    def context(self) -> RequestContext:
        """The request context, rebuilt only when the client's identity changes."""
        if self._context is None:
            self._context = RequestContext(
                client_id=self.client_id,
                client_source_address=self.address,
                client_source_port=self.port,
                client_software_name=self.software_name,
                client_software_version=self.software_version,
                connection_id=self.connection_id,
                principal=self.principal,
            )
        return self._context
