"""What some settings' text means beyond its type, and the host files tools never read.

The tool user (``SUBAGENTS_TOOL_USER``) and the model rate limits
(``SUBAGENTS_MODEL_RATE_LIMITS``) are parsed here, and ``${VAR}`` expanded in the
files that name a worker's secrets (MCP servers, model endpoints); ``secret_paths``
lists the host files and directories that hold credentials or the project's own data.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path

import platformdirs
from temporalio.common import WorkerDeploymentVersion

from durable_subagents.connection._temporal_config import credential_files
from durable_subagents.errors import InvalidRequest

SECRET_ENV_NAME = re.compile(
    r"API_?KEY|PAYLOAD_(OLD_)?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|TLS_CLIENT_KEY"
    r"|GRPC_META|CODEC_AUTH",
    re.IGNORECASE,
)
"""Environment variable names treated as secrets: their values are scrubbed from spans.
(Tool commands never see the worker's environment: theirs is built from an allowlist.)"""

__all__ = [
    "SECRET_ENV_NAME",
    "check_model_patterns",
    "deployment_version",
    "expand_variables",
    "parse_rate_limits",
    "parse_tool_user",
    "secret_paths",
]

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_variables(text: str, environ: Mapping[str, str], missing: list[str]) -> str:
    """``text`` with ``${VAR}`` and ``${VAR:-default}`` replaced from ``environ``.

    As Claude Code expands its MCP configuration: ``${VAR:-default}`` takes the default
    where ``VAR`` is unset or empty. An unset variable without a default is added to
    ``missing`` (and expands to ""), so the caller can name every one at once.
    """

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ and (environ[name] or default is None):
            return environ[name]
        if default is not None:
            return default
        missing.append(name)
        return ""

    return _VARIABLE.sub(value, text)


def parse_tool_user(value: str) -> tuple[int, int] | None:
    """``SUBAGENTS_TOOL_USER`` as (uid, gid): ``auto`` is None; root is refused.

    ``UID`` alone takes the user's primary group where the system knows the user, else
    the same number; a name is looked up in the system's user database.

    Raises:
        ValueError: An unknown user or group, or root.
    """
    import grp
    import pwd

    text = value.strip()
    if text == "auto":
        return None
    user, _, group = text.partition(":")
    try:
        if user.isdigit():
            uid = int(user)
            try:
                primary = pwd.getpwuid(uid).pw_gid
            except KeyError:
                primary = uid
        else:
            entry = pwd.getpwnam(user)
            uid, primary = entry.pw_uid, entry.pw_gid
        if not group:
            gid = primary
        else:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise ValueError(
            f"SUBAGENTS_TOOL_USER={value!r}: no such user or group on this machine; use "
            "auto, UID[:GID] or NAME[:GROUP]"
        ) from None
    if uid == 0 or gid == 0:
        raise ValueError(
            f"SUBAGENTS_TOOL_USER={value!r} is root: tool commands never run as root; name "
            "an unprivileged user, or use auto (the workspace's owner)"
        )
    return uid, gid


_PROVIDER = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def check_model_patterns(value: str) -> str:
    """``SUBAGENTS_MODELS`` as given, if each pattern is ``*`` or ``NAME:pattern``.

    Which names are providers or endpoints only a worker knows (``parse_model_patterns``).

    Raises:
        InvalidRequest: A pattern is neither; the message says what to give.
    """
    for pattern in (p.strip() for p in value.split(",")):
        if pattern and pattern != "*" and not re.fullmatch(r"[a-z][a-z0-9_-]*:\S+", pattern):
            raise InvalidRequest(
                f"SUBAGENTS_MODELS: {pattern!r} is not a model pattern; give provider:model "
                "patterns separated by commas (openai:gpt-4.1*,anthropic:*), or * for any model"
            )
    return value


def parse_rate_limits(value: str) -> dict[str, float]:
    """``openai=5,anthropic=0.5`` as ``{"openai": 5.0, "anthropic": 0.5}``.

    Raises:
        ValueError: An entry is not ``provider=turns per second`` with a positive,
            finite rate.
    """
    out: dict[str, float] = {}
    for entry in value.split(","):
        if not entry.strip():
            continue
        name, sep, rate = entry.partition("=")
        name = name.strip()
        try:
            per_second = float(rate)
        except ValueError:
            per_second = math.nan
        if not sep or not _PROVIDER.fullmatch(name) or not 0 < per_second < math.inf:
            raise ValueError(
                f"SUBAGENTS_MODEL_RATE_LIMITS entry {entry.strip()!r} is not "
                "provider=turns per second (e.g. openai=5,anthropic=0.5)"
            )
        out[name] = per_second
    return out


def secret_paths(
    blob_dir: Path, data_dir: Path, profile: str | None, config_file: Path | None
) -> list[Path]:
    """What no tool may read: blob store, data and config dirs, Temporal and AWS keys.

    Args:
        blob_dir: The local blob directory.
        data_dir: The project's data directory.
        profile: The Temporal profile in use (its certificate files are listed).
        config_file: Temporal's configuration file, if one is named.
    """
    paths = [
        blob_dir,
        data_dir,
        Path.home() / ".aws",
        Path(platformdirs.user_config_dir("durable-subagents")),
        Path(platformdirs.user_config_dir("temporalio")),
    ]
    paths += credential_files(profile, config_file)
    for name in (
        "TEMPORAL_CONFIG_FILE",
        "TEMPORAL_TLS_CLIENT_CERT_PATH",
        "TEMPORAL_TLS_CLIENT_KEY_PATH",
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
        "TEMPORAL_TLS_CERT",
        "TEMPORAL_TLS_KEY",
        "TEMPORAL_TLS_CA",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        value = os.environ.get(name)
        if value:
            paths.append(Path(value))
    return paths


def deployment_version(name: str | None, build: str | None) -> WorkerDeploymentVersion | None:
    """A Worker Deployment Version of both settings, or ``None`` for neither.

    Raises:
        InvalidRequest: Only one of them is set, or the deployment name has a ``.``
            (Temporal writes a version as ``<deployment>.<build ID>``).
    """
    if name is None and build is None:
        return None
    if build is None:
        raise InvalidRequest(
            f"deployment name {name!r} without a build ID: add --build-id ID "
            "(SUBAGENTS_BUILD_ID) for a versioned worker, or drop --deployment-name "
            "(SUBAGENTS_DEPLOYMENT_NAME) for an unversioned one"
        )
    if name is None:
        raise InvalidRequest(
            f"build ID {build!r} without a deployment name: add --deployment-name NAME "
            "(SUBAGENTS_DEPLOYMENT_NAME) for a versioned worker, or drop --build-id "
            "(SUBAGENTS_BUILD_ID) for an unversioned one"
        )
    if "." in name:
        raise InvalidRequest(
            f"deployment name {name!r} has a '.'; Temporal writes a version as "
            "<deployment>.<build ID>: choose a name without one"
        )
    return WorkerDeploymentVersion(deployment_name=name, build_id=build)
