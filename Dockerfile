# syntax=docker/dockerfile:1
# The hami-place agent image: `python -m agent`, configured by HAMI_PLACE_* variables (docs/agent.md).
# Build: docker build -t ghcr.io/hami-place/hami-place-agent:0.1.0 .

FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
# Only what the package build needs (see .dockerignore).
COPY pyproject.toml setup.cfg README.md LICENSE constraints.txt ./
COPY hami_place_core ./hami_place_core
COPY kubectl_hami_place ./kubectl_hami_place
COPY agent ./agent
RUN /opt/venv/bin/pip install -c constraints.txt ".[agent]"

FROM python:3.11-slim
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=builder /opt/venv /opt/venv
# Numeric, so runAsNonRoot can verify it; the chart sets the same uid.
USER 65532:65532
EXPOSE 8083
ENTRYPOINT ["python", "-m", "agent"]
