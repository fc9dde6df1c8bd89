# syntax=docker/dockerfile:1
# gpu-efficiency-exporter: the exporter on Debian 13's CPython 3.13, as a non-root user, under the
# NVIDIA container runtime (which mounts the driver's libnvidia-ml into the container).
#   docker build --build-arg REVISION=$(git rev-parse HEAD) -t gpu-efficiency-exporter:0.1.0 .
#   docker build --target dcgm -t gpu-efficiency-exporter:0.1.0-dcgm .     # with DCGM's client
#   docker run --rm --gpus all -p 9947:9947 gpu-efficiency-exporter:0.1.0
# Where no registry is reachable, deploy/image/build-image.sh builds it with podman from a Debian
# base made by mmdebstrap, passed as DEBIAN_IMAGE; tests/deploy/test_image.py runs it (docs/container-image.md).

# debian:trixie-slim, its 2026-08-24 build (Debian 13.6), pinned by the digest of its multi-arch index.
ARG DEBIAN_IMAGE=debian:trixie-slim@sha256:d7e12182ce18b85b93007c1dedf31f2d29e01ccf3182cc4017c709b6259bc132
# Only for the dcgm target: an image whose apt sources hold NVIDIA's DCGM packages.
ARG DCGM_SOURCE_IMAGE=nvidia/cuda:12.9.1-base-ubuntu22.04@sha256:59436e8ac61921052d8f420be8b8cb8b117f1d7cc643397a289e37aaa0b83ea1

# ---- wheels: the exporter's, and its pinned dependencies' (pip runs here only); a build stage,
# used by the runtime's RUN --mount, so it carries no labels
# hadolint ignore=DL3049
FROM ${DEBIAN_IMAGE} AS wheels
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3-pip \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE NOTICE ./
COPY gpueff ./gpueff
COPY deploy/image/constraints.txt ./
RUN python3 -m pip wheel --no-cache-dir --disable-pip-version-check \
        --wheel-dir /wheels --constraint constraints.txt ".[kubernetes]" pip

# ---- runtime: Debian's python3, the exporter in /opt/exporter, no pip
FROM ${DEBIAN_IMAGE} AS runtime
COPY deploy/image/packages.txt deploy/image/install-exporter.sh /usr/local/share/gpu-efficiency-exporter/
COPY LICENSE NOTICE /usr/share/doc/gpu-efficiency-exporter/
# hadolint ignore=DL3008
RUN apt-get update \
    && xargs --arg-file=/usr/local/share/gpu-efficiency-exporter/packages.txt apt-get install -y --no-install-recommends \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=wheels,source=/wheels,target=/wheels \
    /usr/local/share/gpu-efficiency-exporter/install-exporter.sh /wheels
# Declared after the install: a new commit changes only the labels' layer, never the cached install.
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="gpu-efficiency-exporter" \
      org.opencontainers.image.description="Prometheus exporter that tells how much real work each NVIDIA GPU does: SM activity, occupancy, tensor and DRAM activity beside coarse utilization" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/gpu-efficiency-exporter/gpu-efficiency-exporter" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="gpu-efficiency-exporter authors" \
      org.opencontainers.image.documentation="https://github.com/gpu-efficiency-exporter/gpu-efficiency-exporter/blob/main/docs/kubernetes.md"
# The NVIDIA container runtime reads these: every GPU, and only the NVML (utility) driver libraries.
ENV PATH=/opt/exporter/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    GPU_EFFICIENCY_EXPORTER_REVISION=${REVISION}
# A fixed numeric non-root user, so Kubernetes' runAsNonRoot can check it.
USER 65532:65532
EXPOSE 9947
ENTRYPOINT ["gpu-efficiency-exporter"]
CMD ["--web.listen-address=:9947"]

# ---- DCGM's client library and Python bindings, as NVIDIA's packages install them
FROM ${DCGM_SOURCE_IMAGE} AS dcgm-packages
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends datacenter-gpu-manager-4-core \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /dcgm/lib \
    && cp -a /usr/lib/x86_64-linux-gnu/libdcgm.so* /dcgm/lib/ \
    && test -f /usr/share/datacenter-gpu-manager-4/bindings/python3/dcgm_agent.py

# ---- the DCGM variant: the runtime plus libdcgm and the bindings where the exporter looks for
# them (--dcgm.bindings-path default); it talks to an nv-hostengine through --dcgm.host.
FROM runtime AS dcgm
COPY --from=dcgm-packages /dcgm/lib/ /usr/lib/x86_64-linux-gnu/
COPY --from=dcgm-packages /usr/share/datacenter-gpu-manager-4/bindings/python3 /usr/share/datacenter-gpu-manager-4/bindings/python3
LABEL org.opencontainers.image.title="gpu-efficiency-exporter-dcgm"

# ---- the default target: the plain runtime
FROM runtime
