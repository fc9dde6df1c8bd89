#!/bin/sh
# Installs gpu-efficiency-exporter into the virtual environment /opt/exporter from a folder of
# wheels (the exporter's, its dependencies', and pip's own), offline, so that no pip stays in the
# image: the venv is made without pip, and pip runs once from its wheel file.
# Runs as root inside the image: a RUN of the Dockerfile.
#   install-exporter.sh WHEEL_FOLDER
set -eu
wheels=$1
for pip_wheel in "$wheels"/pip-*.whl; do :; done
[ -f "$pip_wheel" ] || { echo "install-exporter.sh: no pip wheel in $wheels" >&2; exit 1; }
python3 -m venv --without-pip /opt/exporter
# A wheel is a zip file that Python can run from; pip documents this way to use it.
/opt/exporter/bin/python "$pip_wheel/pip" install --no-index --find-links "$wheels" --no-cache-dir \
    --disable-pip-version-check --no-warn-script-location --quiet "gpu-efficiency-exporter[kubernetes]"
/opt/exporter/bin/gpu-efficiency-exporter --version
