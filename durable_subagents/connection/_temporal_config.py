"""Temporal's own client configuration: environment variables and TOML profiles.

Every edge connects through here (the worker, ``subagents dev``'s clients,
``SubagentClient.connect``, the CLI, the MCP server), so a deployment configures them
as it configures the ``temporal`` CLI: ``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``,
``TEMPORAL_API_KEY``, ``TEMPORAL_TLS*``, ``TEMPORAL_GRPC_META_*`` and profiles of a TOML
file (``TEMPORAL_CONFIG_FILE``, ``TEMPORAL_PROFILE`` or ``--profile``), loaded by
``temporalio.envconfig`` with the CLI's precedence: an explicit ``--address`` or
``address=`` first, then the environment, then the profile.

Failures of the settings themselves (a profile that does not exist, a certificate file
that cannot be read) and refusals by the server (a TLS handshake it did not accept, an
API key it rejected) become one line that names the setting and the fix.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs
from temporalio.envconfig import ClientConfigProfile, ClientConfigTLS, DataSource
from temporalio.service import TLSConfig

from durable_subagents.errors import (
    TemporalAccessDenied,
    TemporalConfigError,
)

__all__ = [
    "CREDENTIAL_ENV_PREFIXES",
    "TemporalConnection",
    "access_denied",
    "credential_files",
    "is_credential_env",
    "load_profile",
    "profile_defaults",
    "resolve_connection",
]

CREDENTIAL_ENV_PREFIXES = (
    "TEMPORAL_API_KEY",
    "TEMPORAL_TLS",
    "TEMPORAL_GRPC_META_",
    "TEMPORAL_CODEC_AUTH",
)
"""Environment variables that carry Temporal credentials, or name the files that do:
no tool ever sees them (``SUBAGENTS_TOOL_ENV`` refuses them)."""

_SETTINGS: dict[str, tuple[str, str]] = {
    "address": ("TEMPORAL_ADDRESS", "address"),
    "namespace": ("TEMPORAL_NAMESPACE", "namespace"),
    "api_key": ("TEMPORAL_API_KEY", "api_key"),
    "tls": ("TEMPORAL_TLS", "tls.disabled"),
    "server_name": ("TEMPORAL_TLS_SERVER_NAME", "tls.server_name"),
    "server_ca": ("TEMPORAL_TLS_SERVER_CA_CERT_PATH", "tls.server_ca_cert_path"),
    "client_cert": ("TEMPORAL_TLS_CLIENT_CERT_PATH", "tls.client_cert_path"),
    "client_key": ("TEMPORAL_TLS_CLIENT_KEY_PATH", "tls.client_key_path"),
}
"""Each setting's environment variable and TOML key (in a ``[profile.NAME]`` table)."""

_DATA_ENV = {
    "server_ca": "TEMPORAL_TLS_SERVER_CA_CERT_DATA",
    "client_cert": "TEMPORAL_TLS_CLIENT_CERT_DATA",
    "client_key": "TEMPORAL_TLS_CLIENT_KEY_DATA",
}


def is_credential_env(name: str) -> bool:
    """Whether an environment variable carries Temporal credentials (see the prefixes)."""
    return name.strip().upper().startswith(CREDENTIAL_ENV_PREFIXES)


def config_file_path(config_file: Path | None = None) -> Path:
    """The TOML file profiles are read from.

    The given one, else ``TEMPORAL_CONFIG_FILE``, else the platform's default
    (``~/.config/temporalio/temporal.toml`` on Linux).
    """
    if config_file is not None:
        return config_file
    env = os.environ.get("TEMPORAL_CONFIG_FILE")
    if env:
        return Path(env)
    return Path(platformdirs.user_config_dir("temporalio")) / "temporal.toml"


def _profile_name(profile: str | None) -> str:
    return profile or os.environ.get("TEMPORAL_PROFILE") or "default"


def load_profile(
    profile: str | None = None, config_file: Path | None = None
) -> ClientConfigProfile:
    """The profile, with the ``TEMPORAL_*`` environment applied over it.

    Args:
        profile: The profile's name (``--profile``); None: ``TEMPORAL_PROFILE``, else
            ``default``. A missing file is no error for ``default``.
        config_file: The TOML file; None: ``TEMPORAL_CONFIG_FILE`` or the default path.

    Raises:
        TemporalConfigError: The file does not parse, or the named profile is not in it.
    """
    # An empty variable counts as unset (compose's ``${TEMPORAL_API_KEY:-}``): for
    # envconfig an empty key would still turn TLS on, and an empty path names ".".
    env = {k: v for k, v in os.environ.items() if v or not k.startswith("TEMPORAL_")}
    if config_file is not None:
        env["TEMPORAL_CONFIG_FILE"] = str(config_file)
    try:
        return ClientConfigProfile.load(profile=profile, override_env_vars=env)
    except Exception as err:  # the bridge's ConfigError, or an unreadable file
        name = _profile_name(profile)
        path = config_file_path(config_file)
        why = " ".join(str(err).split())
        if "not found" in why and "Profile" in why:
            raise TemporalConfigError(
                f"Temporal profile {name!r} is not in {path}: add a [profile.{name}] table "
                "there, point TEMPORAL_CONFIG_FILE at the file that has it, or choose "
                "another with --profile / TEMPORAL_PROFILE"
            ) from None
        raise TemporalConfigError(
            f"cannot read the Temporal configuration file {path} (TEMPORAL_CONFIG_FILE): "
            f"{why}; fix it, or unset TEMPORAL_CONFIG_FILE to use the environment alone"
        ) from None


def profile_defaults(
    profile: str | None = None, config_file: Path | None = None
) -> tuple[str | None, str | None]:
    """The address and namespace the profile and environment give, or None each.

    Never raises: a broken configuration is reported when connecting, so that commands
    which never connect (``keygen``, ``agents``) still run.
    """
    try:
        loaded = load_profile(profile, config_file)
    except TemporalConfigError:
        return None, None
    return loaded.address, loaded.namespace


@dataclass(frozen=True)
class _Where:
    """Where each setting came from, to name it in a message."""

    profile: str
    file: Path
    from_file: frozenset[str] = frozenset()

    def name(self, key: str) -> str:
        """How to name ``key`` in a message.

        The environment variable that set it, else its key in the profile; for a setting
        set nowhere, the variable to set.
        """
        env, toml = _SETTINGS[key]
        data = _DATA_ENV.get(key)
        if data and os.environ.get(data) and not os.environ.get(env):
            return data
        if os.environ.get(env) or key not in self.from_file:
            return env
        return f"{toml} of profile {self.profile!r} in {self.file}"


@dataclass(frozen=True)
class TemporalConnection:
    """Everything a client needs to connect: where, and with which credentials.

    ``connect_kwargs()`` gives ``temporalio.client.Client.connect``'s TLS, API key and
    metadata arguments; ``address`` and ``namespace`` go beside them.
    """

    address: str
    namespace: str
    api_key: str | None = field(default=None, repr=False)
    tls: bool | TLSConfig = field(default=False, repr=False)
    rpc_metadata: Mapping[str, str] = field(default_factory=dict, repr=False)
    where: _Where = field(default_factory=lambda: _Where("default", config_file_path()))

    @property
    def tls_on(self) -> bool:
        """Whether the connection uses TLS."""
        return self.tls is not False

    @property
    def client_cert(self) -> bool:
        """Whether a client certificate is configured."""
        return isinstance(self.tls, TLSConfig) and self.tls.client_cert is not None

    def connect_config(self) -> dict[str, Any]:
        """Every ``temporalio.client.Client.connect`` argument the connection sets.

        Example:
            >>> conn = Settings().temporal_connection()  # doctest: +SKIP
            >>> client = await Client.connect(**conn.connect_config())  # doctest: +SKIP
        """
        return {"target_host": self.address, "namespace": self.namespace, **self.connect_kwargs()}

    def connect_kwargs(self) -> dict[str, Any]:
        """``Client.connect`` arguments besides the address and namespace."""
        out: dict[str, Any] = {}
        if self.tls is not False:
            out["tls"] = self.tls
        if self.api_key is not None:
            out["api_key"] = self.api_key
        if self.rpc_metadata:
            out["rpc_metadata"] = dict(self.rpc_metadata)
        return out


_PEM_MARKERS = {
    "server_ca": (b"-----BEGIN CERTIFICATE-----", "CA certificate"),
    "client_cert": (b"-----BEGIN CERTIFICATE-----", "client certificate"),
    "client_key": (b"PRIVATE KEY-----", "client private key"),
}


def _read(source: DataSource | None, key: str, where: _Where) -> bytes | None:
    """A certificate or key from a path or inline data, checked to be PEM."""
    if source is None:
        return None
    marker, what = _PEM_MARKERS[key]
    if isinstance(source, Path):
        try:
            data = source.read_bytes()
        except OSError as err:
            why = err.strerror or type(err).__name__
            raise TemporalConfigError(
                f"{where.name(key)}={source}: cannot read the {what} ({why}); point it at "
                f"the {what} file (PEM), or unset it"
            ) from None
        shown = f"{where.name(key)}={source}"
    else:
        data = source.encode() if isinstance(source, str) else source
        shown = where.name(key)
    if marker not in data:
        raise TemporalConfigError(
            f"{shown} is not a PEM {what} (no {marker.decode().strip('-')} block); give "
            f"the {what} in PEM form"
        )
    return data


def resolve_connection(
    address: str | None,
    namespace: str | None,
    *,
    profile: str | None = None,
    config_file: Path | None = None,
    default_address: str = "localhost:7233",
    default_namespace: str = "default",
) -> TemporalConnection:
    """The connection the settings describe, with certificates and keys read.

    Args:
        address: An explicit address (``--address``, ``address=``); it wins over the
            environment and the profile.
        namespace: An explicit namespace, likewise.
        profile: The profile's name; None: ``TEMPORAL_PROFILE``, else ``default``.
        config_file: The TOML file; None: ``TEMPORAL_CONFIG_FILE`` or the default path.
        default_address: When neither gives an address.
        default_namespace: When neither gives a namespace.

    Raises:
        TemporalConfigError: The profile or file cannot be used, a certificate or key
            cannot be read or is not PEM, or a client certificate has no key (or a key
            no certificate).
    """
    loaded = load_profile(profile, config_file)
    from_file = _keys_from_file(profile, config_file)
    where = _Where(_profile_name(profile), config_file_path(config_file), from_file)
    tls_config: ClientConfigTLS | None = loaded.tls
    tls: bool | TLSConfig = loaded.api_key is not None  # an API key turns TLS on
    if tls_config is not None and tls_config.disabled is True:
        tls = False
    elif tls_config is not None:
        cert = _read(tls_config.client_cert, "client_cert", where)
        key = _read(tls_config.client_private_key, "client_key", where)
        if (cert is None) != (key is None):
            have, lack = ("client_cert", "client_key")
            if key is not None:
                have, lack = lack, have
            raise TemporalConfigError(
                f"{where.name(have)} is set but not {where.name(lack)}: a client "
                "certificate needs its private key; set both, or neither"
            )
        tls = TLSConfig(
            server_root_ca_cert=_read(tls_config.server_root_ca_cert, "server_ca", where),
            domain=tls_config.server_name,
            client_cert=cert,
            client_private_key=key,
        )
    return TemporalConnection(
        address=address or loaded.address or default_address,
        namespace=namespace or loaded.namespace or default_namespace,
        api_key=loaded.api_key,
        tls=tls,
        rpc_metadata=dict(loaded.grpc_meta),
        where=where,
    )


def _keys_from_file(profile: str | None, config_file: Path | None) -> frozenset[str]:
    """Which settings the profile in the file sets (to name them in messages)."""
    try:
        file_only = ClientConfigProfile.load(
            profile=profile,
            config_source=config_file_path(config_file),
            disable_env=True,
        )
    except Exception:
        return frozenset()
    keys = {k for k in ("address", "namespace", "api_key") if getattr(file_only, k)}
    tls = file_only.tls
    if tls is not None:
        keys |= {"tls"} if tls.disabled is not None else set()
        keys |= {"server_name"} if tls.server_name else set()
        keys |= {"server_ca"} if tls.server_root_ca_cert is not None else set()
        keys |= {"client_cert"} if tls.client_cert is not None else set()
        keys |= {"client_key"} if tls.client_private_key is not None else set()
    return frozenset(keys)


def credential_files(profile: str | None = None, config_file: Path | None = None) -> list[Path]:
    """The files that hold Temporal credentials, which no tool may see.

    The configuration file, and the certificates and keys the profile and the
    environment name.
    """
    paths = [config_file_path(config_file)]
    profiles = []
    with contextlib.suppress(TemporalConfigError):
        profiles.append(load_profile(profile, config_file))
    with contextlib.suppress(Exception):  # the file's own paths, which the environment may hide
        profiles.append(
            ClientConfigProfile.load(
                profile=profile, config_source=config_file_path(config_file), disable_env=True
            )
        )
    for loaded in profiles:
        if loaded.tls is not None:
            for source in (
                loaded.tls.client_cert,
                loaded.tls.client_private_key,
                loaded.tls.server_root_ca_cert,
            ):
                if isinstance(source, Path) and source not in paths:
                    paths.append(source)
    return paths


_NAME_EXPECTED = re.compile(r'expected: DnsName\("([^"]+)"\)|expected: IpAddress\(([^)]+)\)')
_INVALID_CERT = re.compile(r"InvalidCertificate\((\w+)")
_HANDSHAKE_CLOSED = (
    "close_notify",
    "UnexpectedEof",
    "CertificateRequired",
    "HandshakeFailure",
    # TLS 1.3 checks the client's certificate after the client's side of the handshake:
    # a server that refuses it may close before its alert is read, or while the
    # client's first call is on its way (hyper: Canceled, "connection closed")
    "ConnectionReset",
    "BrokenPipe",
    '"connection closed"',
)
_PLAIN_REFUSED = ("BrokenPipe", "close_notify", "frame", "ConnectionReset", '"connection closed"')


def access_denied(err: BaseException, conn: TemporalConnection) -> TemporalAccessDenied | None:
    """The one-line error for a TLS or credential refusal, or None for other failures.

    ``err`` is what ``Client.connect`` (or a call) raised. Unreachable addresses and
    timeouts are not refusals and keep their own wording.
    """
    text = str(err)
    at = f"Temporal at {conn.address}"
    w = conn.where
    if any(mark in text for mark in ("UnknownIssuer", "UnknownCA", "BadSignature")):
        return TemporalAccessDenied(
            f"{at} presented a certificate this client does not trust: set "
            f"{w.name('server_ca')} to the CA certificate that signed it (PEM)"
        )
    if "NotValidForName" in text:
        match = _NAME_EXPECTED.search(text)
        name = next((g for g in match.groups() if g), "?") if match else "?"
        return TemporalAccessDenied(
            f"{at} presented a certificate that is not valid for the name {name!r}: set "
            f"{w.name('server_name')} to a name the certificate holds, or connect by it"
        )
    if "InvalidCertificate(Expired" in text:
        return TemporalAccessDenied(f"{at} presented an expired certificate: renew it")
    invalid = _INVALID_CERT.search(text)
    if invalid:
        return TemporalAccessDenied(
            f"{at} presented a certificate this client cannot accept ({invalid.group(1)}): "
            f"check {w.name('server_ca')} and {w.name('server_name')}"
        )
    if "InvalidContentType" in text and conn.tls_on:
        return TemporalAccessDenied(
            f"{at} does not speak TLS on that port, but TLS is on (an API key or "
            f"{w.name('tls')} turns it on): connect to the server's TLS port, or set "
            "TEMPORAL_TLS=false for a plain one"
        )
    if "PrivateKeyParseError" in text:
        return TemporalAccessDenied(
            f"the client private key ({w.name('client_key')}) cannot be parsed: give the "
            "key of the client certificate as PEM (PKCS#8, PKCS#1 or SEC1)"
        )
    if "Unauthenticated" in text or "PermissionDenied" in text:
        status = "PermissionDenied" if "PermissionDenied" in text else "Unauthenticated"
        if conn.api_key is not None:
            return TemporalAccessDenied(
                f"{at} refused the API key ({w.name('api_key')}; {status}): set a valid, "
                f"unexpired key for namespace {conn.namespace!r}"
            )
        if conn.client_cert:
            return TemporalAccessDenied(
                f"{at} refused this client's certificate for namespace {conn.namespace!r} "
                f"({status}): use one the namespace accepts ({w.name('client_cert')})"
            )
        return TemporalAccessDenied(
            f"{at} requires credentials ({status}): set TEMPORAL_API_KEY, or a client "
            "certificate (TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH)"
        )
    # a refusal during a call reads "transport error"; one while connecting carries
    # only tonic's "tonic::transport::Error(Transport, ...)"
    if "transport error" not in text and "transport::Error" not in text:
        return None
    if conn.tls_on and any(mark in text for mark in _HANDSHAKE_CLOSED):
        if conn.client_cert:
            return TemporalAccessDenied(
                f"{at} refused the TLS handshake with this client's certificate "
                f"({w.name('client_cert')}): use one signed by a CA the server trusts"
            )
        return TemporalAccessDenied(
            f"{at} refused the TLS handshake: it asks for a client certificate, and none "
            "is set. Set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH "
            "(or tls.client_cert_path and tls.client_key_path in a profile)"
        )
    # a TLS port closes on the plain preface; with the preface still unread (a busy
    # machine) the close is a reset
    if not conn.tls_on and any(mark in text for mark in _PLAIN_REFUSED):
        return TemporalAccessDenied(
            f"{at} closed the connection at once: it probably requires TLS. Set "
            "TEMPORAL_TLS=true (and TEMPORAL_TLS_SERVER_CA_CERT_PATH for a private CA), "
            "a client certificate (TEMPORAL_TLS_CLIENT_CERT_PATH and "
            "TEMPORAL_TLS_CLIENT_KEY_PATH), or TEMPORAL_API_KEY"
        )
    return None
