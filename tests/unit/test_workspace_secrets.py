"""Which files of a workspace hold the worker's secrets: a bounded look at its top."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import SecretStr

from durable_subagents.config import Settings
from durable_subagents.worker._workspace_secrets import (
    MAX_BYTES,
    MAX_FILES,
    files_holding,
    worker_secrets,
)

KEY = "c2VjcmV0LXBheWxvYWQta2V5LW9mLTMyLWJ5dGVzISE="
API = "sk-unit-0123456789abcdef"


def test_the_secrets_are_the_secret_looking_variables_and_the_settings_keys() -> None:
    env = {
        "OPENAI_API_KEY": API,
        "TEMPORAL_API_KEY": "tmprl-0123456789",
        "SUBAGENTS_PAYLOAD_OLD_KEYS": "old-key-number-one,old-key-number-two",
        "SHORT_TOKEN": "abc",  # too short to look for
        "HOME": "/root/not-a-secret",
    }
    settings = Settings(payload_key=SecretStr(KEY), notify_secret=SecretStr("whsec_notify-secret"))
    found = worker_secrets(settings, env)
    assert ("OPENAI_API_KEY", API) in found
    assert ("TEMPORAL_API_KEY", "tmprl-0123456789") in found
    assert ("SUBAGENTS_PAYLOAD_OLD_KEYS", "old-key-number-two") in found  # key by key
    assert ("SUBAGENTS_PAYLOAD_KEY", KEY) in found
    assert ("SUBAGENTS_NOTIFY_SECRET", "whsec_notify-secret") in found
    assert not any(name in ("SHORT_TOKEN", "HOME") for name, _ in found)


def test_only_regular_files_at_the_top_and_within_the_size_are_read(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    outside = tmp_path / "outside.env"
    outside.write_text(f"KEY={KEY}\n")
    root.mkdir()
    (root / ".env").write_text(f"# payload key\nSUBAGENTS_PAYLOAD_KEY={KEY}\n")
    (root / "notes.md").write_text(f'the key is "{API}"\n')
    (root / "clean.txt").write_text("nothing here\n")
    (root / "linked.env").symlink_to(outside)  # never followed
    (root / "big.env").write_bytes(b"x" * MAX_BYTES + KEY.encode())  # over the size
    (root / "sub").mkdir()
    (root / "sub" / ".env").write_text(f"KEY={KEY}\n")  # below the top
    os.mkfifo(root / "pipe.env")  # opened without blocking, and not read
    secrets = [("SUBAGENTS_PAYLOAD_KEY", KEY), ("OPENAI_API_KEY", API)]
    assert files_holding(root, secrets) == {
        ".env": ["SUBAGENTS_PAYLOAD_KEY"],
        "notes.md": ["OPENAI_API_KEY"],
    }
    assert files_holding(root, []) == {}
    assert files_holding(tmp_path / "missing", secrets) == {}


def test_at_most_max_files_are_read_env_files_first(tmp_path: Path) -> None:
    for n in range(MAX_FILES + 20):
        (tmp_path / f"file-{n:04}.txt").write_text("plain\n")
    (tmp_path / "zz-last.txt").write_text(f"{API}\n")  # past the files read
    (tmp_path / ".env.local").write_text(f"OPENAI_API_KEY={API}\n")
    assert files_holding(tmp_path, [("OPENAI_API_KEY", API)]) == {".env.local": ["OPENAI_API_KEY"]}
