"""TLS, mutual TLS and the data-plane token against the real server's listeners, with certificates
made by the test (trustme)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from floodgate import AsyncFloodgate, ConfigError, Floodgate, Forbidden, Unauthorized, Unavailable
from support import RunningFloodgate, floodgate

RULES = """
rules:
  - name: per-user
    key: [user]
    algorithm: fixed_window
    limit: 100
    window: 1h
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("pki")
    ca, other = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(str(where / "ca.pem"))
    other.cert_pem.write_to_path(str(where / "other-ca.pem"))
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_pem.write_to_path(str(where / "server.key"))
    server.cert_chain_pems[0].write_to_path(str(where / "server.pem"))
    for name, issuer in (("client", ca), ("stranger", other)):
        leaf = issuer.issue_cert(f"{name}@clients.test")
        leaf.private_key_pem.write_to_path(str(where / f"{name}.key"))
        leaf.cert_chain_pems[0].write_to_path(str(where / f"{name}.pem"))
    return where


def tls_policy(pki: Path, mutual: bool) -> str:
    client_ca = f", client_ca: {pki / 'ca.pem'}" if mutual else ""
    tls = f"tls: {{ cert: {pki / 'server.pem'}, key: {pki / 'server.key'}{client_ca} }}"
    return f"store: {{ kind: memory }}\n{tls}\n{RULES}"


@pytest.fixture(scope="module")
def tls_server(pki: Path) -> Iterator[RunningFloodgate]:
    with floodgate(tls_policy(pki, mutual=False), scheme="https") as running:
        yield running


@pytest.fixture(scope="module")
def mtls_server(pki: Path) -> Iterator[RunningFloodgate]:
    with floodgate(tls_policy(pki, mutual=True), scheme="https") as running:
        yield running


def test_https_verified_by_the_ca_bundle(tls_server: RunningFloodgate, pki: Path) -> None:
    with Floodgate(tls_server.url, ca=pki / "ca.pem", deadline=5.0) as client:
        assert client.check({"user": "u1"}).status == 200
    localhost = tls_server.url.replace("127.0.0.1", "localhost")
    with Floodgate(localhost, ca=pki / "ca.pem", deadline=5.0) as client:
        assert client.check({"user": "u1"}).status == 200


def test_another_cas_bundle_is_a_tls_failure_the_fail_mode_decides(tls_server: RunningFloodgate, pki: Path) -> None:
    with Floodgate(tls_server.url, ca=pki / "other-ca.pem", deadline=5.0, fail_mode="closed", breaker=False) as client:
        decision = client.check({"user": "u1"})
        assert not decision.allowed and decision.failure is not None and decision.failure.reason == "tls"
        with pytest.raises(Unavailable, match="CERTIFICATE_VERIFY_FAILED") as refused:
            client.report({"user": "u1"})
        assert refused.value.reason == "tls"
        assert client.stats().failures["tls"] == 2


def test_mutual_tls_admits_the_clients_certificate_only(mtls_server: RunningFloodgate, pki: Path) -> None:
    with Floodgate(
        mtls_server.url, ca=pki / "ca.pem", client_cert=pki / "client.pem", client_key=pki / "client.key", deadline=5.0
    ) as client:
        assert client.check({"user": "u1"}).status == 200
    for cert in (None, "stranger"):
        files = {} if cert is None else {"client_cert": pki / f"{cert}.pem", "client_key": pki / f"{cert}.key"}
        with Floodgate(mtls_server.url, ca=pki / "ca.pem", deadline=5.0, breaker=False, **files) as refused:  # type: ignore[arg-type]
            decision = refused.check({"user": "u1"}, fail_mode="closed")
            assert not decision.allowed and decision.failure is not None, cert
            assert decision.failure.reason == "tls", cert


def test_unusable_tls_settings_are_named(pki: Path) -> None:
    url = "https://127.0.0.1:1"
    for settings, field in [
        ({"ca": pki / "nowhere.pem"}, "ca"),
        ({"ca": pki / "server.key"}, "ca"),
        ({"client_cert": pki / "client.pem"}, "client_key"),
        ({"client_cert": pki / "client.pem", "client_key": pki / "stranger.key"}, "client_cert"),
    ]:
        with pytest.raises(ConfigError) as refused:
            Floodgate(url, **settings)  # type: ignore[arg-type]
        assert refused.value.field == field, settings


AUTH_POLICY = (
    """
store: { kind: memory }
auth:
  clients:
    - name: checker
      token_env: FLOODGATE_TEST_CHECK_TOKEN
      scopes: [check]
    - name: tenant-bound
      token_env: FLOODGATE_TEST_TENANT_TOKEN
      scopes: [check, report]
      descriptors: { tenant: shop }
"""
    + RULES
)
CHECK_TOKEN = "check-token-0123456789abcdef"
TENANT_TOKEN = "tenant-token-0123456789abcdef"


def test_the_data_plane_token_and_its_refusals() -> None:
    env = {"FLOODGATE_TEST_CHECK_TOKEN": CHECK_TOKEN, "FLOODGATE_TEST_TENANT_TOKEN": TENANT_TOKEN}
    with floodgate(AUTH_POLICY, env=env) as server:
        with Floodgate(server.url, deadline=5.0) as anonymous, pytest.raises(Unauthorized) as unauthorized:
            anonymous.check({"user": "u1"})
        assert unauthorized.value.status == 401
        with Floodgate(server.url, deadline=5.0, token=CHECK_TOKEN) as checker:
            assert checker.check({"user": "u1"}).status == 200
            with pytest.raises(Forbidden, match="report"):
                checker.report({"user": "u1"})
        with Floodgate(server.url, deadline=5.0, token=TENANT_TOKEN) as bound:
            assert bound.check({"user": "u1", "tenant": "shop"}).allowed
            with pytest.raises(Forbidden, match="tenant"):
                bound.check({"user": "u1", "tenant": "other"})


@pytest.mark.anyio
async def test_async_https_and_mutual_tls(
    tls_server: RunningFloodgate, mtls_server: RunningFloodgate, pki: Path
) -> None:
    async with AsyncFloodgate(tls_server.url, ca=pki / "ca.pem", deadline=5.0) as verified:
        assert (await verified.check({"user": "u1"})).status == 200
        assert (await verified.check({"user": "u1"})).status == 200  # on the kept-alive connection
    async with AsyncFloodgate(tls_server.url, ca=pki / "other-ca.pem", deadline=5.0, breaker=False) as wrong:
        decision = await wrong.check({"user": "u1"}, fail_mode="closed")
        assert decision.failure is not None and decision.failure.reason == "tls"
    mutual = {"client_cert": pki / "client.pem", "client_key": pki / "client.key"}
    async with AsyncFloodgate(mtls_server.url, ca=pki / "ca.pem", deadline=5.0, **mutual) as admitted:  # type: ignore[arg-type]
        assert (await admitted.check({"user": "u1"})).status == 200
    async with AsyncFloodgate(mtls_server.url, ca=pki / "ca.pem", deadline=5.0, breaker=False) as refused:
        decision = await refused.check({"user": "u1"}, fail_mode="closed")
        assert decision.failure is not None and decision.failure.reason == "tls"
