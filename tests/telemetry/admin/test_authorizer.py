"""The one authorizer: the four decisions every door asks it for."""

from __future__ import annotations

from telemetry.admin.authorizer import Authorizer, Refusal


def test_without_a_security_section_every_principal_may_alter_and_manage_credentials() -> None:
    open_server = Authorizer()
    assert open_server.may_alter("User:ANONYMOUS")
    assert open_server.may_manage_credentials("User:bob")
    assert open_server.may_describe("User:bob")


def test_with_a_security_section_only_super_users_may_alter() -> None:
    secured = Authorizer(super_users=frozenset({"User:admin"}))
    assert secured.may_alter("User:admin")
    assert secured.may_manage_credentials("User:admin")
    assert not secured.may_alter("User:bob")
    assert not secured.may_manage_credentials("User:bob")
    assert secured.may_describe("User:bob")
    assert not Authorizer(super_users=frozenset()).may_alter("User:admin")


def test_the_http_admin_api_needs_its_token_or_a_loopback_listener() -> None:
    with_token = Authorizer(admin_token="s3cret")
    assert with_token.http_admin_refusal("Bearer s3cret") is None
    assert with_token.http_admin_refusal("Bearer wrong") == Refusal(
        401, "the admin API needs Authorization: Bearer <[admin] token>"
    )
    assert with_token.http_admin_refusal("bearer s3cret") is not None  # exactly "Bearer <token>"
    assert Authorizer(admin_loopback=True).http_admin_refusal("") is None
    refusal = Authorizer(admin_loopback=False).http_admin_refusal("Bearer s3cret")
    assert refusal is not None and refusal.status == 403


def test_the_forward_route_is_off_without_its_token_and_needs_it_otherwise() -> None:
    off = Authorizer().forward_refusal("Bearer anything")
    assert off == Refusal(403, "forwarding is disabled: set forward.token")
    on = Authorizer(forward_token="plug-in")
    assert on.forward_refusal("Bearer plug-in") is None
    assert on.forward_refusal("bearer  plug-in ") is None  # the scheme's case, spaces around
    assert on.forward_refusal("Basic plug-in") == Refusal(401, "a valid bearer token is required")
    assert on.forward_refusal("Bearer other") is not None
