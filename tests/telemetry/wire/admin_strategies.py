"""Hypothesis strategies for the admin-plane messages at every version, limited to
what that version carries, so that encode → decode must give back exactly the input."""

from __future__ import annotations

from hypothesis import strategies as st

from telemetry.wire.admin_apis import ADMIN_VERSIONS, AdminRequest, AdminResponse
from telemetry.wire.config_messages import (
    AlterableConfig,
    AlterConfigsResource,
    AlterConfigsResourceResponse,
    ConfigResource,
    DescribeConfigsEntry,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from telemetry.wire.quota_messages import (
    AlterClientQuotasEntry,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterClientQuotasResult,
    ComponentData,
    DescribeClientQuotasEntry,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    EntityData,
    QuotaOp,
    QuotaValue,
)
from telemetry.wire.sasl_messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from telemetry.wire.scram_messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
    CredentialInfo,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from tests.telemetry.wire.strategies import int8s, int16s, int32s, texts, tuples

int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
nullable_texts = st.none() | texts
float64s = st.floats(allow_nan=False)
small_bytes = st.binary(max_size=24)

ADMIN_ALL_VERSIONS: list[tuple[int, int]] = [
    (key, version)
    for key, supported in ADMIN_VERSIONS.items()
    for version in range(supported.min_version, supported.max_version + 1)
]
"""Every (admin api key, version) the admin codec knows."""


def _describe_configs_request(version: int) -> st.SearchStrategy[DescribeConfigsRequest]:
    resource = st.builds(
        DescribeConfigsResource,
        resource_type=int8s,
        resource_name=texts,
        configuration_keys=st.none() | tuples(texts),
    )
    return st.builds(
        DescribeConfigsRequest,
        resources=tuples(resource),
        include_synonyms=st.booleans(),
        include_documentation=st.booleans() if version >= 3 else st.just(False),
    )


def _describe_configs_response(version: int) -> st.SearchStrategy[DescribeConfigsResponse]:
    synonym = st.builds(DescribeConfigsSynonym, name=texts, value=nullable_texts, source=int8s)
    entry = st.builds(
        DescribeConfigsEntry,
        name=texts,
        value=nullable_texts,
        read_only=st.booleans(),
        config_source=int8s,
        is_sensitive=st.booleans(),
        synonyms=tuples(synonym),
        config_type=int8s if version >= 3 else st.just(0),
        documentation=nullable_texts if version >= 3 else st.none(),
    )
    result = st.builds(
        DescribeConfigsResult,
        resource_type=int8s,
        resource_name=texts,
        error_code=int16s,
        error_message=nullable_texts,
        configs=tuples(entry),
    )
    return st.builds(DescribeConfigsResponse, results=tuples(result), throttle_time_ms=int32s)


def _incremental_alter_configs_request() -> st.SearchStrategy[IncrementalAlterConfigsRequest]:
    config = st.builds(AlterableConfig, name=texts, config_operation=int8s, value=nullable_texts)
    resource = st.builds(
        AlterConfigsResource, resource_type=int8s, resource_name=texts, configs=tuples(config)
    )
    return st.builds(
        IncrementalAlterConfigsRequest, resources=tuples(resource), validate_only=st.booleans()
    )


def _incremental_alter_configs_response() -> st.SearchStrategy[IncrementalAlterConfigsResponse]:
    response = st.builds(
        AlterConfigsResourceResponse,
        resource_type=int8s,
        resource_name=texts,
        error_code=int16s,
        error_message=nullable_texts,
    )
    return st.builds(
        IncrementalAlterConfigsResponse, responses=tuples(response), throttle_time_ms=int32s
    )


def _list_config_resources_request(version: int) -> st.SearchStrategy[ListConfigResourcesRequest]:
    if version < 1:
        return st.just(ListConfigResourcesRequest())
    return st.builds(ListConfigResourcesRequest, resource_types=tuples(int8s))


def _list_config_resources_response(
    version: int,
) -> st.SearchStrategy[ListConfigResourcesResponse]:
    resource = st.builds(
        ConfigResource,
        resource_name=texts,
        resource_type=int8s if version >= 1 else st.just(16),
    )
    return st.builds(
        ListConfigResourcesResponse,
        config_resources=tuples(resource),
        error_code=int16s,
        throttle_time_ms=int32s,
    )


entities = tuples(st.builds(EntityData, entity_type=texts, entity_name=nullable_texts))


def _describe_client_quotas_request() -> st.SearchStrategy[DescribeClientQuotasRequest]:
    component = st.builds(ComponentData, entity_type=texts, match_type=int8s, match=nullable_texts)
    return st.builds(
        DescribeClientQuotasRequest, components=tuples(component), strict=st.booleans()
    )


def _describe_client_quotas_response() -> st.SearchStrategy[DescribeClientQuotasResponse]:
    entry = st.builds(
        DescribeClientQuotasEntry,
        entity=entities,
        values=tuples(st.builds(QuotaValue, key=texts, value=float64s)),
    )
    return st.builds(
        DescribeClientQuotasResponse,
        entries=st.none() | tuples(entry),
        error_code=int16s,
        error_message=nullable_texts,
        throttle_time_ms=int32s,
    )


def _alter_client_quotas_request() -> st.SearchStrategy[AlterClientQuotasRequest]:
    op = st.builds(QuotaOp, key=texts, value=float64s, remove=st.booleans())
    entry = st.builds(AlterClientQuotasEntry, entity=entities, ops=tuples(op))
    return st.builds(AlterClientQuotasRequest, entries=tuples(entry), validate_only=st.booleans())


def _alter_client_quotas_response() -> st.SearchStrategy[AlterClientQuotasResponse]:
    result = st.builds(
        AlterClientQuotasResult, entity=entities, error_code=int16s, error_message=nullable_texts
    )
    return st.builds(AlterClientQuotasResponse, entries=tuples(result), throttle_time_ms=int32s)


def _sasl_authenticate_response(version: int) -> st.SearchStrategy[SaslAuthenticateResponse]:
    return st.builds(
        SaslAuthenticateResponse,
        error_code=int16s,
        error_message=nullable_texts,
        auth_bytes=small_bytes,
        session_lifetime_ms=int64s if version >= 1 else st.just(0),
    )


def _describe_scram_response() -> st.SearchStrategy[DescribeUserScramCredentialsResponse]:
    info = st.builds(CredentialInfo, mechanism=int8s, iterations=int32s)
    result = st.builds(
        DescribeUserScramCredentialsResult,
        user=texts,
        error_code=int16s,
        error_message=nullable_texts,
        credential_infos=tuples(info),
    )
    return st.builds(
        DescribeUserScramCredentialsResponse,
        results=tuples(result),
        error_code=int16s,
        error_message=nullable_texts,
        throttle_time_ms=int32s,
    )


def _alter_scram_request() -> st.SearchStrategy[AlterUserScramCredentialsRequest]:
    deletion = st.builds(ScramCredentialDeletion, name=texts, mechanism=int8s)
    upsertion = st.builds(
        ScramCredentialUpsertion,
        name=texts,
        mechanism=int8s,
        iterations=int32s,
        salt=small_bytes,
        salted_password=small_bytes,
    )
    return st.builds(
        AlterUserScramCredentialsRequest, deletions=tuples(deletion), upsertions=tuples(upsertion)
    )


def _alter_scram_response() -> st.SearchStrategy[AlterUserScramCredentialsResponse]:
    result = st.builds(
        AlterUserScramCredentialsResult, user=texts, error_code=int16s, error_message=nullable_texts
    )
    return st.builds(
        AlterUserScramCredentialsResponse, results=tuples(result), throttle_time_ms=int32s
    )


def admin_requests(api_key: int, version: int) -> st.SearchStrategy[AdminRequest]:
    strategies: dict[int, st.SearchStrategy[AdminRequest]] = {
        17: st.builds(SaslHandshakeRequest, mechanism=texts),
        32: _describe_configs_request(version),
        36: st.builds(SaslAuthenticateRequest, auth_bytes=small_bytes),
        44: _incremental_alter_configs_request(),
        48: _describe_client_quotas_request(),
        49: _alter_client_quotas_request(),
        50: st.builds(DescribeUserScramCredentialsRequest, users=st.none() | tuples(texts)),
        51: _alter_scram_request(),
        74: _list_config_resources_request(version),
    }
    return strategies[api_key]


def admin_responses(api_key: int, version: int) -> st.SearchStrategy[AdminResponse]:
    strategies: dict[int, st.SearchStrategy[AdminResponse]] = {
        17: st.builds(SaslHandshakeResponse, error_code=int16s, mechanisms=tuples(texts)),
        32: _describe_configs_response(version),
        36: _sasl_authenticate_response(version),
        44: _incremental_alter_configs_response(),
        48: _describe_client_quotas_response(),
        49: _alter_client_quotas_response(),
        50: _describe_scram_response(),
        51: _alter_scram_response(),
        74: _list_config_resources_response(version),
    }
    return strategies[api_key]
