"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802 / RFC 7677), the server side, as Kafka runs it.

Two rounds (Kafka's ``ScramSaslServer``)::

    client-first   n,[a=authzid],n=saslname,r=cnonce[,extensions]
    server-first   r=cnonce+snonce,s=base64(salt),i=iterations
    client-final   c=base64(gs2 header),r=cnonce+snonce,p=base64(ClientProof)
    server-final   v=base64(ServerSignature)

Kafka's rules kept here: only the gs2 flag ``n`` (no channel binding); an
authzid must equal the username; the saslname is unescaped (``=2C`` → ``,``,
``=3D`` → ``=``); the password is UTF-8 without SASLprep
(``ScramFormatter.normalize``); ``tokenauth=true`` asks for a delegation
token, which kip714 does not issue, so it fails as an unknown token does in
Kafka; other extensions are ignored. A stored credential has 4096..16384
iterations (``ScramMechanism``). Kafka never sends an ``e=`` server-final: a
failure is SaslAuthenticate error 58, and for SCRAM the message is the generic
one (:func:`telemetry.security.errors.generic_failure_message`), whatever went
wrong. kip714 also checks that ``c=`` carries the gs2 header the client sent
(RFC 5802 §5.1), which every conforming client does.

The server never holds a password: only salt, StoredKey = H(ClientKey) and
ServerKey, compared with :func:`hmac.compare_digest`.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from telemetry.security.errors import SaslAuthenticationError

if TYPE_CHECKING:
    from collections.abc import Callable

MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384
_DEFAULT_SALT_BYTES: Final = 32


class ScramMechanism(enum.Enum):
    """The two mechanisms, with Kafka's ids (DescribeUserScramCredentials) and hashes."""

    SCRAM_SHA_256 = ("SCRAM-SHA-256", 1, "sha256")
    SCRAM_SHA_512 = ("SCRAM-SHA-512", 2, "sha512")

    def __init__(self, mechanism_name: str, mechanism_id: int, hash_name: str) -> None:
        self.mechanism_name = mechanism_name
        self.mechanism_id = mechanism_id
        self.hash_name = hash_name

    @classmethod
    def by_name(cls, name: str) -> ScramMechanism | None:
        return next((m for m in cls if m.mechanism_name == name), None)

    @classmethod
    def by_id(cls, mechanism_id: int) -> ScramMechanism | None:
        return next((m for m in cls if m.mechanism_id == mechanism_id), None)

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.digest(key, data, self.hash_name)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScramCredential:
    """What is stored for one user and mechanism (Kafka's ``ScramCredential``)."""

    salt: bytes
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


def salted_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(
    mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """The stored form, from what AlterUserScramCredentials carries (salt, SaltedPassword)."""
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(
        salt=salt,
        stored_key=mechanism.hash(client_key),
        server_key=mechanism.hmac(salted, b"Server Key"),
        iterations=iterations,
    )


def derive_credential(
    mechanism: ScramMechanism,
    password: str,
    *,
    iterations: int = MIN_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """A new credential for ``password`` with a random salt unless one is given.

    Raises:
        ValueError: iterations outside Kafka's 4096..16384.
    """
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(
            f"iterations must lie in [{MIN_ITERATIONS}, {MAX_ITERATIONS}], got {iterations}"
        )
    salt = secrets.token_bytes(_DEFAULT_SALT_BYTES) if salt is None else salt
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations)


def verify_password(mechanism: ScramMechanism, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` produces the stored key: PLAIN checks against SCRAM credentials."""
    salted = salted_password(mechanism, password, credential.salt, credential.iterations)
    stored_key = mechanism.hash(mechanism.hmac(salted, b"Client Key"))
    return hmac.compare_digest(stored_key, credential.stored_key)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _unescape_saslname(saslname: str) -> str | None:
    """RFC 5802 saslname: ``=2C`` and ``=3D`` are the only escapes; None if malformed."""
    out: list[str] = []
    i = 0
    while i < len(saslname):
        char = saslname[i]
        if char == ",":
            return None
        if char == "=":
            escape = saslname[i : i + 3]
            if escape == "=2C":
                out.append(",")
            elif escape == "=3D":
                out.append("=")
            else:
                return None
            i += 3
            continue
        out.append(char)
        i += 1
    return "".join(out)


@dataclass(frozen=True, slots=True)
class _ClientFirst:
    gs2_header: str
    username: str
    nonce: str
    bare: str
    token_auth: bool


class ScramServer:
    """One SCRAM exchange on one connection, server side.

    Feed each SaslAuthenticate token to :meth:`evaluate_response`, send back
    what it returns; after the second round :attr:`complete` is true and
    :attr:`username` is the authenticated principal name. Any failure raises
    :class:`SaslAuthenticationError` and leaves the exchange failed for good.

    ``lookup(username)`` returns the stored credential for this mechanism or
    None. ``server_nonce`` exists for test vectors; by default it is random.
    """

    __slots__ = (
        "_auth_message_head",
        "_client_first",
        "_credential",
        "_lookup",
        "_mechanism",
        "_server_nonce",
        "_state",
        "username",
    )

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: Callable[[str], ScramCredential | None],
        *,
        server_nonce: str | None = None,
    ) -> None:
        self._mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = secrets.token_urlsafe(24) if server_nonce is None else server_nonce
        self._state = "client-first"
        self._client_first: _ClientFirst | None = None
        self._credential: ScramCredential | None = None
        self._auth_message_head = ""
        self.username: str | None = None

    @property
    def mechanism(self) -> ScramMechanism:
        return self._mechanism

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def evaluate_response(self, token: bytes) -> bytes:
        """Process one client token and return the server's reply token.

        Raises:
            SaslAuthenticationError: the token is malformed, the user or proof
                is wrong, or the exchange is already over.
        """
        state = self._state
        self._state = "failed"  # until this round succeeds
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("SCRAM message is not UTF-8") from None
        if state == "client-first":
            reply = self._server_first(text)
            self._state = "client-final"
        elif state == "client-final":
            reply = self._server_final(text)
            self._state = "complete"
        else:
            raise self._fail(f"SCRAM token received in state {state}")
        return reply.encode("utf-8")

    def _fail(self, reason: str) -> SaslAuthenticationError:
        return SaslAuthenticationError.hidden(reason, self._mechanism.mechanism_name)

    def _parse_client_first(self, text: str) -> _ClientFirst:
        # gs2-header: only "n" (client does not support channel binding), as Kafka's regex.
        parts = text.split(",")
        if len(parts) < 4 or parts[0] != "n":
            raise self._fail("Invalid SCRAM client first message")
        authzid = parts[1]
        if authzid and not authzid.startswith("a="):
            raise self._fail("Invalid SCRAM client first message")
        if not parts[2].startswith("n=") or not parts[3].startswith("r="):
            raise self._fail("Invalid SCRAM client first message")
        username = _unescape_saslname(parts[2][2:])
        nonce = parts[3][2:]
        if not username or not nonce:
            raise self._fail("Invalid SCRAM client first message")
        extensions: dict[str, str] = {}
        for extension in parts[4:]:
            key, separator, value = extension.partition("=")
            if not separator or not key:
                raise self._fail("Invalid SCRAM client first message")
            extensions[key] = value
        authorization_id = _unescape_saslname(authzid[2:]) if authzid else ""
        if authorization_id is None:
            raise self._fail("Invalid SCRAM client first message")
        if authorization_id and authorization_id != username:
            raise SaslAuthenticationError.shown(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        return _ClientFirst(
            gs2_header=f"n,{authzid},",
            username=username,
            nonce=nonce,
            bare=",".join(parts[2:]),
            token_auth=extensions.get("tokenauth", "").lower() == "true",
        )

    def _server_first(self, text: str) -> str:
        first = self._parse_client_first(text)
        if first.token_auth:
            raise self._fail("delegation tokens are not supported: tokenauth=true")
        credential = self._lookup(first.username)
        if credential is None:
            raise self._fail("Authentication failed: Invalid user credentials")
        if credential.iterations < MIN_ITERATIONS:
            raise self._fail(f"Iterations {credential.iterations} is less than the minimum")
        self._client_first = first
        self._credential = credential
        server_first = (
            f"r={first.nonce}{self._server_nonce},s={_b64(credential.salt)},"
            f"i={credential.iterations}"
        )
        self._auth_message_head = f"{first.bare},{server_first}"
        return server_first

    def _server_final(self, text: str) -> str:
        first, credential = self._client_first, self._credential
        assert first is not None  # set by the first round
        assert credential is not None
        without_proof, separator, proof_text = text.rpartition(",p=")
        parts = without_proof.split(",")
        if not separator or len(parts) < 2:
            raise self._fail("Invalid SCRAM client final message")
        if not parts[0].startswith("c=") or not parts[1].startswith("r="):
            raise self._fail("Invalid SCRAM client final message")
        try:
            channel_binding = _unb64(parts[0][2:])
            proof = _unb64(proof_text)
        except (binascii.Error, ValueError):
            raise self._fail("Invalid SCRAM client final message") from None
        if channel_binding != first.gs2_header.encode("utf-8"):
            raise self._fail("Invalid channel binding in the final client message")
        if parts[1][2:] != first.nonce + self._server_nonce:
            raise self._fail("Invalid client nonce in the final client message.")
        mechanism = self._mechanism
        auth_message = f"{self._auth_message_head},{without_proof}".encode()
        client_signature = mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise self._fail("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(mechanism.hash(client_key), credential.stored_key):
            raise self._fail("Invalid client credentials")
        self.username = first.username
        return f"v={_b64(mechanism.hmac(credential.server_key, auth_message))}"
