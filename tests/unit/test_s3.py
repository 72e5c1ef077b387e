"""Blob store URLs: a wrong one is refused clearly, file URLs and the default stay local."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_subagents.config import Settings
from durable_subagents.errors import InvalidRequest


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("s3:///prefix", "names no bucket"),
        ("gs://bucket/x", "is not supported"),
        ("file://host/x", "is not a local path"),
    ],
)
def test_a_wrong_blob_url_is_refused_clearly(url: str, says: str) -> None:
    with pytest.raises(InvalidRequest, match=says):
        Settings(blob_url=url).blob_store()


def test_file_urls_and_the_default_stay_local(tmp_path: Path) -> None:
    from durable_subagents.storage._local import LocalBlobStore

    by_url = Settings(blob_url=f"file://{tmp_path}/b", namespace="ns").blob_store()
    assert isinstance(by_url, LocalBlobStore) and by_url.root == tmp_path / "b" / "ns"
    default = Settings(data_dir=tmp_path / "d", namespace="ns").blob_store()
    assert isinstance(default, LocalBlobStore) and default.root == tmp_path / "d" / "blobs" / "ns"
    # a file:// store is hidden from tools like the default directory
    assert (tmp_path / "b").resolve() in Settings(blob_url=f"file://{tmp_path}/b").hidden_paths()


"""60 KB: each read of it is a tool result far over the inline limit, so a blob."""
