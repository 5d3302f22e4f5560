# syntax=docker/dockerfile:1
# The hami-place agent image: the agent (`python -m agent`, configured by HAMI_PLACE_* variables,
# docs/agent.md) and its runtime dependencies only, as a non-root user; the chart runs it with a
# read-only root filesystem.
#
#   docker build -t ghcr.io/hami-place/hami-place-agent:0.1.0 .
#   make image     # the same with podman/buildah, on a Debian base made by debootstrap (docs/release.md)
#
# PYTHON_IMAGE is any image with python3 (>= 3.11) and its venv module: the official Python image for
# users, a debootstrap-made Debian bookworm (python3, python3-venv, ca-certificates) for `make image`.
ARG PYTHON_IMAGE=docker.io/library/python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
# So `make image` can remove this stage's image once the final one is built (release/image.py).
LABEL io.hami-place.stage=builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
WORKDIR /src
# Only what the package build needs (see .dockerignore).
COPY pyproject.toml setup.cfg README.md LICENSE constraints.txt ./
COPY hami_place_core ./hami_place_core
COPY kubectl_hami_place ./kubectl_hami_place
COPY agent ./agent
# The optional secret `ca` is a CA bundle for networks that intercept TLS (make image passes the
# host's); without it pip uses the image's own trust store.
RUN --mount=type=secret,id=ca,required=false \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi; \
    /opt/venv/bin/pip install -c constraints.txt ".[agent]" \
    && /opt/venv/bin/pip uninstall -y pip setuptools

FROM ${PYTHON_IMAGE}
ARG VERSION=dev
LABEL org.opencontainers.image.title="hami-place-agent" \
      org.opencontainers.image.description="The hami-place agent: webhooks, REST API, mover and autopilot for HAMi GPU clusters" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
# The venv only (no sources, no build tools), with the bytecode pip compiled at install: nothing is
# written at run time, as the root filesystem is read-only.
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=builder /opt/venv /opt/venv
# Numeric, so runAsNonRoot can verify it; the chart sets the same uid.
USER 65532:65532
EXPOSE 8083 8085
ENTRYPOINT ["/opt/venv/bin/python", "-m", "agent"]
