# Worker image: `subagents worker` with bubblewrap for the tool sandbox.
# It keeps no shared state on disk: tasks live in Temporal, blobs in the store named by
# SUBAGENTS_BLOB_URL and the AWS_* variables (docker-compose.yml points them at MinIO;
# without them blobs land in the container, where no other worker or client sees them),
# and /workspace is the tasks' working directory, mounted by whoever runs it.
#
# The worker runs as the unprivileged user `subagents` (uid and gid 10001), and so do
# the tools it sandboxes. The sandbox needs user namespaces: the container must be
# allowed to create them (docker run --security-opt seccomp=unconfined --security-opt
# apparmor=unconfined, as docker-compose.yml does; or a seccomp profile that allows
# unshare and clone with CLONE_NEWUSER), and the host kernel must allow unprivileged
# ones (kernel.unprivileged_userns_clone=1; on Ubuntu 24.04+ also
# kernel.apparmor_restrict_unprivileged_userns=0). The mounted workspace must be
# writable by 10001 (chown -R 10001:10001 workspace), or run the container as its
# owner (docker run --user "$(id -u):$(id -g)"). With --user root, the worker runs tool
# commands as the workspace's owner instead (see SUBAGENTS_TOOL_USER in the README).
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap git ripgrep \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY durable_subagents ./durable_subagents
RUN pip install --no-cache-dir . opentelemetry-exporter-otlp-proto-http

RUN groupadd --gid 10001 subagents \
    && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin subagents \
    && mkdir /workspace /var/lib/subagents-overlays \
    && chown subagents:subagents /workspace /var/lib/subagents-overlays
USER 10001:10001

ENV SUBAGENTS_WORKSPACE=/workspace
# Commands write to overlays here while they run: a volume, since overlayfs takes no
# overlay (the container's own root) as an upper layer.
ENV SUBAGENTS_OVERLAY_DIR=/var/lib/subagents-overlays
VOLUME ["/workspace", "/var/lib/subagents-overlays"]
ENTRYPOINT ["subagents"]
CMD ["worker"]
