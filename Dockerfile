# gpu-efficiency-exporter: a small image that runs the exporter as a non-root user under the NVIDIA
# container runtime (which mounts the driver's libnvidia-ml into the container).
#   docker build -t gpu-efficiency-exporter:0.1.0 .
#   docker run --rm --gpus all -p 9947:9947 gpu-efficiency-exporter:0.1.0

# CPython 3.13, one of the two Pythons tests/run.sh runs the whole suite on.
ARG PYTHON_IMAGE=python:3.13-slim-trixie

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
RUN python -m venv /opt/exporter \
    && /opt/exporter/bin/pip install --no-cache-dir --disable-pip-version-check ".[kubernetes]"

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpu-efficiency-exporter" \
      org.opencontainers.image.description="Prometheus exporter that tells how much real work each NVIDIA GPU does: SM activity, occupancy, tensor and DRAM activity beside coarse utilization" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="gpu-efficiency-exporter authors" \
      org.opencontainers.image.documentation="docs/kubernetes.md"
COPY --from=build /opt/exporter /opt/exporter
# The NVIDIA container runtime reads these: every GPU, and only the NVML (utility) driver libraries.
ENV PATH=/opt/exporter/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
# A fixed numeric non-root user, so Kubernetes' runAsNonRoot can check it.
USER 65532:65532
EXPOSE 9947
ENTRYPOINT ["gpu-efficiency-exporter"]
CMD ["--web.listen-address=:9947"]
