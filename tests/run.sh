#!/usr/bin/env bash
# The one test command: installs what the tests need (Debian packages, a virtual environment with
# the project and its test extras) and runs every test. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

debian_packages=(prometheus prometheus-alertmanager)
missing=()
command -v promtool >/dev/null || missing+=(prometheus)
command -v prometheus-alertmanager >/dev/null || command -v alertmanager >/dev/null || missing+=(prometheus-alertmanager)
if ((${#missing[@]})); then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    echo "tests/run.sh: installing Debian packages: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The Debian packages start their services; the tests run their own instances.
for service in prometheus prometheus-alertmanager prometheus-node-exporter; do
    if command -v systemctl >/dev/null && systemctl is-active --quiet "$service" 2>/dev/null; then
        systemctl stop "$service" || true
    fi
done

venv=${GPUEFF_TEST_VENV:-.venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e ".[test]"
exec "$venv/bin/python" -m pytest "$@"
