"""A real S3 wire for tests: moto's S3 server in a process of its own on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

from .helpers import CEILING

ACCESS_KEY = "test-access-key"
SECRET_KEY = "test-secret-key"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """``moto_server`` speaking the S3 protocol; buckets made with boto3 (as an operator
    would with ``aws s3 mb`` or ``mc mb``)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from moto.server import main; main()",
                "-H",
                "127.0.0.1",
                "-p",
                str(self.port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + CEILING  # ends when it answers, or exits
        while True:
            try:
                urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1).close()
                break
            except (urllib.error.URLError, OSError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.1)

    def env(self) -> dict[str, str]:
        """The standard variables a worker or client on another host would be given."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
        }

    def boto(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def new_bucket(self) -> str:
        name = f"subagents-{uuid.uuid4().hex[:12]}"
        self.boto().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.boto().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def set_env(server: S3Server) -> dict[str, str | None]:
    """Point this process at ``server``; returns the old values for ``restore_env``."""
    old = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    return old


def restore_env(old: dict[str, str | None]) -> None:
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
