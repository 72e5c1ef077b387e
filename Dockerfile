# Worker image: `subagents worker` with bubblewrap for the tool sandbox.
# It keeps no shared state on disk: tasks live in Temporal, blobs in the store named by
# SUBAGENTS_BLOB_URL and the AWS_* variables (docker-compose.yml points them at MinIO;
# without them blobs land in the container, where no other worker or client sees them),
# and /workspace is the tasks' working directory, mounted by whoever runs it.
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap git ripgrep \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY durable_subagents ./durable_subagents
RUN pip install --no-cache-dir . opentelemetry-exporter-otlp-proto-http

ENV SUBAGENTS_WORKSPACE=/workspace
VOLUME ["/workspace"]
ENTRYPOINT ["subagents"]
CMD ["worker"]
