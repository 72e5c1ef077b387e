"""What a worker needs to run Claude on a cloud: the extra, a region, a project, credentials.

Checked when a provider is built (a task's first turn: a non-retryable task failure
that says what to set) and when a worker whose models name ``bedrock:`` or ``vertex:``
starts (one line, and it does not start). The SDKs' own variables are read:
``AWS_REGION``/``AWS_DEFAULT_REGION``, ``CLOUD_ML_REGION``,
``ANTHROPIC_VERTEX_PROJECT_ID``; credentials come from each cloud's standard chain, or
``AWS_BEARER_TOKEN_BEDROCK`` / ``GOOGLE_OAUTH_ACCESS_TOKEN``. Messages name variables,
never their values.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = [
    "GOOGLE_SCOPE",
    "aws_region",
    "credentials_problem",
    "google_credentials",
    "setup_problem",
]

GOOGLE_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
"""The OAuth scope Vertex AI's prediction calls need."""

_AWS_CREDENTIALS = (
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an IAM role, or "
    "AWS_BEARER_TOKEN_BEDROCK"
)
_GOOGLE_CREDENTIALS = (
    "run `gcloud auth application-default login`, set GOOGLE_APPLICATION_CREDENTIALS to a "
    "service account key, or set GOOGLE_OAUTH_ACCESS_TOKEN"
)


def aws_region() -> str | None:
    """The region the Bedrock client calls: the environment's, else the AWS profile's."""
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        return region
    import boto3
    import botocore.exceptions

    try:
        return boto3.Session().region_name
    except botocore.exceptions.BotoCoreError:
        return None


def _extra(provider: str, module: str, package: str) -> str | None:
    try:
        __import__(module)
    except ImportError:
        return (
            f"{provider}: {package} is not installed on the worker; "
            f"pip install 'durable-subagents[{provider}]' and restart it"
        )
    return None


def setup_problem(provider: str) -> str | None:
    """What the worker lacks to build ``provider`` (its extra, its region), or None.

    Reads no credentials and asks no server: cheap enough for every task's first turn.
    """
    if provider == "bedrock":
        missing = _extra("bedrock", "boto3", "boto3")
        if missing is None and aws_region() is None:
            missing = (
                "bedrock: no AWS region on the worker; set AWS_REGION (e.g. us-east-1), "
                "or a region in its AWS profile"
            )
        return missing
    if provider == "vertex":
        missing = None
        if not os.environ.get("GOOGLE_OAUTH_ACCESS_TOKEN"):
            missing = _extra("vertex", "google.auth", "google-auth")
        if missing is None and not os.environ.get("CLOUD_ML_REGION"):
            missing = (
                "vertex: CLOUD_ML_REGION is not set on the worker; set it to the region "
                "that serves the model (e.g. us-east5, or global)"
            )
        return missing
    return None


def google_credentials() -> tuple[Any, str | None]:
    """Application default credentials and their project (blocking: a file, a server).

    Raises:
        google.auth.exceptions.DefaultCredentialsError: None were found.
    """
    import google.auth

    credentials, project = google.auth.default(scopes=[GOOGLE_SCOPE])
    return credentials, project


def credentials_problem(provider: str) -> str | None:
    """What the worker lacks to sign ``provider``'s requests, or None.

    Asks each cloud's credential chain, as the first request would (it may read files
    or ask an instance-metadata server): a worker checks it once, when it starts.
    """
    if provider == "bedrock":
        if os.environ.get("AWS_BEARER_TOKEN_BEDROCK"):
            return None
        import boto3
        import botocore.exceptions

        try:
            found = boto3.Session().get_credentials()
        except botocore.exceptions.BotoCoreError as exc:
            return (
                f"bedrock: the worker's AWS credentials cannot be used ({type(exc).__name__}); "
                f"give it {_AWS_CREDENTIALS}"
            )
        if found is None:
            return f"bedrock: no AWS credentials found on the worker; give it {_AWS_CREDENTIALS}"
        return None
    if provider == "vertex":
        project = os.environ.get("ANTHROPIC_VERTEX_PROJECT_ID")
        if os.environ.get("GOOGLE_OAUTH_ACCESS_TOKEN"):
            return None if project else _NO_PROJECT
        import google.auth.exceptions

        try:
            _, found = google_credentials()
        except google.auth.exceptions.GoogleAuthError:
            return f"vertex: no Google credentials found on the worker; {_GOOGLE_CREDENTIALS}"
        return None if project or found else _NO_PROJECT
    return None


_NO_PROJECT = (
    "vertex: no Google Cloud project on the worker; set ANTHROPIC_VERTEX_PROJECT_ID "
    "(the project whose Vertex AI serves the model)"
)
