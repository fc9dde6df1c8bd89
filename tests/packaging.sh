#!/usr/bin/env bash
# The bare-metal install as a user does it: `pipx install` of the wheel that `python -m build`
# makes, on the given Python (tests/run.sh passes Ubuntu 22.04's 3.10 where it has one), then the
# installed daemon's --version and a demo scrape on loopback. The dependencies come from PyPI
# (pip's cache). tests/deploy/test_packaging.py checks the wheel and sdist themselves (twine, offline).
#   tests/packaging.sh BUILD_PYTHON PIPX_PYTHON
set -euo pipefail
cd "$(dirname "$0")/.."
build_python=${1:?usage: tests/packaging.sh BUILD_PYTHON PIPX_PYTHON}
pipx_python=${2:?usage: tests/packaging.sh BUILD_PYTHON PIPX_PYTHON}

work=$(mktemp -d)
daemon=""
cleanup() { [ -z "$daemon" ] || kill "$daemon" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
"$(dirname "$build_python")/pyproject-build" --no-isolation --wheel --outdir "$work/dist" . >"$work/build.log" 2>&1 \
    || { tail -20 "$work/build.log" >&2; exit 1; }
wheel=$(ls "$work"/dist/*.whl)
export PIPX_HOME="$work/pipx" PIPX_BIN_DIR="$work/bin" PIPX_MAN_DIR="$work/man"
"$build_python" -m pipx install --quiet --python "$pipx_python" "$wheel" >"$work/pipx.log" 2>&1 \
    || { tail -20 "$work/pipx.log" >&2; exit 1; }
exporter="$work/bin/gpu-efficiency-exporter"
echo "tests/packaging.sh: pipx installed $("$exporter" --version) on $("$pipx_python" --version)"

port=$("$build_python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$exporter" --demo --web.listen-address="127.0.0.1:$port" >"$work/daemon.log" 2>&1 &
daemon=$!
# Waits for readiness, not for a speed: PATIENCE as in tests/support/waiting.py (a busy machine starts slowly).
"$build_python" - "$port" "${GPUEFF_TEST_PATIENCE:-120}" <<'PY' || { cat "$work/daemon.log" >&2; exit 1; }
import sys, time, urllib.request
url, patience = f"http://127.0.0.1:{sys.argv[1]}", float(sys.argv[2])
deadline = time.monotonic() + patience
while True:
    try:
        with urllib.request.urlopen(url + "/-/ready", timeout=patience) as response:
            if response.status == 200:
                break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit(f"tests/packaging.sh: the pipx-installed demo did not become ready in {patience:g} s")
    time.sleep(0.2)
body = urllib.request.urlopen(url + "/metrics", timeout=patience).read().decode()
assert "gpueff_sm_active_ratio{" in body, body[:500]
print("tests/packaging.sh: the pipx-installed daemon serves the demo")
PY
