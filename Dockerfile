# Worker image: `subagents worker` with bubblewrap for the tool sandbox.
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap git ripgrep \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY durable_subagents ./durable_subagents
RUN pip install --no-cache-dir . opentelemetry-exporter-otlp-proto-http

ENV SUBAGENTS_BLOB_DIR=/data/blobs \
    SUBAGENTS_WORKSPACE=/workspace
VOLUME ["/data", "/workspace"]
ENTRYPOINT ["subagents"]
CMD ["worker"]
