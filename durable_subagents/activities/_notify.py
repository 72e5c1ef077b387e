r"""The ``send_notification`` activity: one signed POST of a task's event.

Signed as Standard Webhooks sign (https://www.standardwebhooks.com/), so receivers
verify with any of its libraries: ``webhook-id`` (the event's id, the same in every
attempt), ``webhook-timestamp`` (Unix seconds of the attempt) and ``webhook-signature``
(``v1,`` and the base64 HMAC-SHA256 of ``{id}.{timestamp}.{body}`` under the secret).

The body carries text a model wrote (previews of its calls, its answer): it is JSON,
so data to the receiver, with control, bidi and invisible characters written as
``\uXXXX`` escapes. The worker posts only to URLs its allowlist holds, judged and
sent as they go on the wire (``normal_notify_url``: no dot segment, so ``/hooks/../x``
is ``/x``), follows no redirect, waits 10 s at most and reads at most 4 KiB of the
answer.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import aiohttp
import yarl
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from durable_subagents.errors import InvalidRequest
from durable_subagents.policy._notify_url import normal_notify_url, notify_url_allowed
from durable_subagents.wire._payloads import NOTIFY_ACTIVITY, NOTIFY_UNSET, NotifyInput
from durable_subagents.wording._terminal import json_shown

__all__ = ["MAX_BODY_BYTES", "Notifier", "notify_key", "sign"]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
"""Largest body sent: calls are left out past it (``calls_total`` still counts them)."""
_ANSWER_BYTES = 4096
"""Bytes of a receiver's answer read (for the error message of a refusal)."""
_RETRY_AFTER_MAX = 600.0
_RETRYABLE = {408, 409, 425, 429}


def notify_key(secret: str) -> bytes:
    """The signing key of ``SUBAGENTS_NOTIFY_SECRET``.

    ``whsec_`` and base64 is Standard Webhooks' form (the key is the decoded bytes);
    any other text is its UTF-8 bytes, at least 16 of them.

    Raises:
        InvalidRequest: the secret is too short or its base64 is broken.
    """
    text = secret.strip()
    if text.startswith("whsec_"):
        try:
            key = base64.b64decode(text.removeprefix("whsec_"), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest(
                "SUBAGENTS_NOTIFY_SECRET starts with whsec_ but the rest is not base64"
            ) from None
    else:
        key = text.encode()
    if len(key) < 16:
        raise InvalidRequest(
            "SUBAGENTS_NOTIFY_SECRET is shorter than 16 bytes; make one with python -c "
            "\"import base64,os; print('whsec_'+base64.b64encode(os.urandom(32)).decode())\""
        )
    return key


def sign(key: bytes, event_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header of a body (Standard Webhooks, ``v1``)."""
    signed = f"{event_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def _body(input: NotifyInput, inbox_url: str | None) -> bytes:
    """The event as JSON with its links, at most ``MAX_BODY_BYTES``."""
    data: dict[str, Any] = input.event.model_dump(mode="json")
    task_id = input.event.task.id
    data["links"] = {"inbox": f"{inbox_url.rstrip('/')}/#task={task_id}" if inbox_url else None}
    while True:
        text = json_shown(json.dumps(data, ensure_ascii=False, separators=(",", ":")))
        body = text.encode()
        if len(body) <= MAX_BODY_BYTES or not data["calls"]:
            return body
        data["calls"] = data["calls"][: len(data["calls"]) // 2]


def _retry_after(value: str | None) -> timedelta | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    if seconds is None or not 0 <= seconds < float("inf"):
        return None
    return timedelta(seconds=min(seconds, _RETRY_AFTER_MAX))


class Notifier:
    """Posts task events for a worker, where its allowlist lets it.

    Args:
        default_url: ``SUBAGENTS_NOTIFY_URL``: where the events of tasks whose spawn
            named no URL go.
        allow: URL prefixes a task's ``notify_url`` must lie under.
        secret: ``SUBAGENTS_NOTIFY_SECRET`` (None: nothing is sent, and each event
            says why).
        inbox_url: Where ``subagents serve``'s page is, for the events' links.
        timeout: Seconds one attempt may take in all.

    Raises:
        InvalidRequest: a URL of ``allow`` or ``default_url`` is refused by
            ``normal_notify_url`` (what is wrong with it), or the secret is too short.
    """

    def __init__(
        self,
        *,
        default_url: str | None = None,
        allow: Sequence[str] = (),
        secret: str | None = None,
        inbox_url: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.default_url = default_url
        self.allow = list(allow) + ([default_url] if default_url else [])
        for prefix in self.allow:
            try:
                normal_notify_url(prefix)
            except InvalidRequest as err:
                where = "SUBAGENTS_NOTIFY_ALLOW or SUBAGENTS_NOTIFY_URL"
                raise InvalidRequest(f"{where}: {err}") from None
        self.key = notify_key(secret) if secret else None
        self.inbox_url = inbox_url
        self.timeout = timeout

    @activity.defn(name=NOTIFY_ACTIVITY)
    async def send_notification(self, input: NotifyInput) -> None:
        """POST one event; Temporal retries what may succeed later.

        Raises:
            ApplicationError: ``NotifyRefused`` (not retried) for a URL outside the
                allowlist, a worker without a secret, a redirect or a 4xx answer;
                ``NotifyUnset`` for an event without a URL on a worker without one;
                a retryable one for 5xx, 408, 409, 425, 429 and network errors.
        """
        url = input.url or self.default_url
        if url is None:
            raise ApplicationError(
                "this worker has no SUBAGENTS_NOTIFY_URL and the task's spawn named no "
                "notify_url: nothing to post to (set it on every worker alike)",
                type=NOTIFY_UNSET,
                non_retryable=True,
                # expected wherever notifications are off: the SDK logs it at DEBUG
                category=ApplicationErrorCategory.BENIGN,
            )
        try:
            # What is judged is what is sent: aiohttp would resolve "/hooks/../x" itself.
            url = normal_notify_url(url)
        except InvalidRequest as err:
            raise ApplicationError(
                f"{err}; nothing was posted", type="NotifyRefused", non_retryable=True
            ) from None
        if not notify_url_allowed(url, self.allow):
            raise ApplicationError(
                f"notify_url {url[:200]} (as it would be sent) is not in this worker's "
                "allowlist; add its prefix to SUBAGENTS_NOTIFY_ALLOW on the workers to have "
                "it posted to",
                type="NotifyRefused",
                non_retryable=True,
            )
        if self.key is None:
            raise ApplicationError(
                "this worker has no SUBAGENTS_NOTIFY_SECRET: it sends no unsigned "
                "notification; set the secret the receiver checks",
                type="NotifyRefused",
                non_retryable=True,
            )
        body = _body(input, self.inbox_url)
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "durable-subagents",
            "webhook-id": input.event.id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(self.key, input.event.id, timestamp, body),
        }
        timeout = aiohttp.ClientTimeout(total=self.timeout, connect=min(self.timeout, 5.0))
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout, trust_env=False) as session,
                session.post(
                    yarl.URL(url, encoded=True),  # as it is: already on the wire's form
                    data=body,
                    headers=headers,
                    allow_redirects=False,
                ) as response,
            ):
                status = response.status
                answer = await response.content.read(_ANSWER_BYTES)
                location = response.headers.get("Location", "")
                retry_after = response.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError) as err:
            raise ApplicationError(
                f"notification to {url[:200]} failed: {type(err).__name__}: {err}",
                type="NotifyUnreachable",
            ) from None
        if 200 <= status < 300:
            log.debug("notification %s delivered to %s", input.event.id, url)
            return
        said = answer.decode("utf-8", "replace").strip()[:200]
        what = f"the receiver at {url[:200]} answered {status}" + (f": {said}" if said else "")
        if 300 <= status < 400:
            raise ApplicationError(
                f"{what}, a redirect to {location[:200]!r}; redirects are never followed: "
                "set the final URL",
                type="NotifyRefused",
                non_retryable=True,
            )
        if status in _RETRYABLE or status >= 500:
            raise ApplicationError(
                what, type="NotifyFailed", next_retry_delay=_retry_after(retry_after)
            )
        raise ApplicationError(what, type="NotifyRefused", non_retryable=True)
