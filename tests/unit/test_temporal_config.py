"""Temporal's client configuration, resolved before anything connects."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from durable_subagents.config import Settings
from durable_subagents.errors import TemporalConfigError

from ..tls_front import Certificates


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certs"))


def test_explicit_address_wins_then_the_environment_then_the_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "temporal.toml"
    config.write_text(
        '[profile.default]\naddress = "profile-host:7233"\nnamespace = "profile-ns"\n'
        '[profile.cloud]\naddress = "ns.acct.tmprl.cloud:7233"\nnamespace = "ns.acct"\n'
        'api_key = "from-file"\n'
    )
    for name in [n for n in os.environ if n.startswith("TEMPORAL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(config))
    assert (Settings().address, Settings().namespace) == ("profile-host:7233", "profile-ns")
    cloud = Settings(profile="cloud")
    assert (cloud.address, cloud.namespace) == ("ns.acct.tmprl.cloud:7233", "ns.acct")
    connection = cloud.temporal_connection()
    assert connection.api_key == "from-file" and connection.tls is True  # a key turns TLS on
    monkeypatch.setenv("TEMPORAL_ADDRESS", "env-host:7233")
    assert Settings(profile="cloud").address == "env-host:7233"
    assert Settings(profile="cloud", address="flag-host:1").address == "flag-host:1"
    assert Settings(profile="cloud", address="flag-host:1").namespace == "ns.acct"
    monkeypatch.setenv("TEMPORAL_TLS", "false")
    assert Settings(profile="cloud").temporal_connection().tls is False
    monkeypatch.setenv("TEMPORAL_PROFILE", "nowhere")
    with pytest.raises(TemporalConfigError, match="profile 'nowhere' is not in"):
        Settings().temporal_connection()


def test_empty_variables_count_as_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compose passes ``${TEMPORAL_API_KEY:-}``: an empty key must not turn TLS on."""
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    for name in (
        "TEMPORAL_ADDRESS",
        "TEMPORAL_API_KEY",
        "TEMPORAL_TLS_CLIENT_CERT_DATA",
        "TEMPORAL_TLS_CLIENT_KEY_DATA",
    ):
        monkeypatch.setenv(name, "")
    settings = Settings()
    connection = settings.temporal_connection()
    assert settings.address == "localhost:7233"
    assert connection.api_key is None and connection.tls is False


def test_a_certificate_without_its_key_is_refused_before_connecting(
    certs: Certificates, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", str(certs.client_cert))
    monkeypatch.delenv("TEMPORAL_TLS_CLIENT_KEY_PATH", raising=False)
    with pytest.raises(TemporalConfigError) as err:
        Settings(address="x:1").temporal_connection()
    assert str(err.value) == (
        "TEMPORAL_TLS_CLIENT_CERT_PATH is set but not TEMPORAL_TLS_CLIENT_KEY_PATH: a client "
        "certificate needs its private key; set both, or neither"
    )


def test_tools_may_not_be_given_temporal_credentials() -> None:
    for name in ("TEMPORAL_API_KEY", "TEMPORAL_TLS_CLIENT_KEY_DATA", "TEMPORAL_GRPC_META_AUTH"):
        with pytest.raises(ValueError, match=f"SUBAGENTS_TOOL_ENV names {name}: Temporal"):
            Settings(address="x:1", tool_env=f"LANG,{name}")
