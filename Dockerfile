# privstream worker image: multi-stage, slim, non-root, no build tools in the final stage.
#
#   docker build -t privstream .
#   docker run --rm privstream explain --config /etc/privstream/config.yaml   (mount a config)
#
# Stage 1 builds wheels for privstream and its dependencies and installs them
# into a virtualenv; stage 2 copies only that virtualenv onto a fresh slim base
# (same Python, same path), so no compiler, wheel cache or source tree ships.
# The compiler is there for four small C extensions: the ledger's hash table
# (service/privstream/ledger/_slots.c), Kafka's partitioner hash
# (service/privstream/worker/_murmur2.c), the fast path's column reader
# (service/privstream/pipeline/_columns.c) and the exact samplers' threshold
# lookup (service/privstream/mechanisms/_thresholds.c).

FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
# unpinned: whatever gcc the base image's Debian release ships builds it
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
# the extras: kafka.format protobuf (protoc lands in the venv's bin) and json_schema
RUN pip wheel --wheel-dir /wheels '.[protobuf,json_schema]' \
    && python -m venv /opt/privstream \
    && /opt/privstream/bin/pip install --no-index --find-links /wheels \
        'privstream[protobuf,json_schema]'

FROM python:3.11-slim
LABEL org.opencontainers.image.title="privstream" \
      org.opencontainers.image.description="Streaming differential-privacy sanitizer for Kafka" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/privstream/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN useradd --system --no-log-init --uid 10001 --user-group --no-create-home \
    --shell /usr/sbin/nologin privstream
COPY --from=build /opt/privstream /opt/privstream
USER 10001:10001
EXPOSE 9400
# /healthz answers 200 while the process runs (README "Commands"); slim has no curl.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9400/healthz', timeout=2)"]
ENTRYPOINT ["privstream"]
CMD ["run", "--config", "/etc/privstream/config.yaml"]
