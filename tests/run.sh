#!/usr/bin/env bash
# The one test command: installs what the tests need (Debian packages, CPython 3.13, a virtual
# environment per Python with the project and its test extras), runs ruff and mypy, builds the
# container image with podman, then the whole suite on the machine's python3 and the suite without end-to-end
# tests on CPython 3.13, one after the other (each keeps both cores busy), then the everyday suite on
# 3.10 and 3.12 side by side. No test asserts a speed (tests/waiting.py), so a machine busy with other
# work makes the command slower, never red. Extra arguments go to every pytest run. Fails when a check
# or a suite fails, or when pytest collects nothing (its exit code 5).
set -euo pipefail
cd "$(dirname "$0")/.."

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
cpu_seconds() {  # sets cpu: CPU seconds (user + system) of the finished child processes so far
    times >"$logs/times"  # called directly, never in $(...): a subshell would count its own children
    cpu=$(awk 'END { for (i = 1; i <= 2; i++) { split($i, part, /[ms]/); total += part[1] * 60 + part[2] } printf "%d", total }' "$logs/times")
}
started=$SECONDS
stage_started=$SECONDS
cpu_seconds
stage_cpu=$cpu
timings=()
stage_done() {  # wall time, and CPU time: on a busy machine the wall time says little
    cpu_seconds
    timings+=("$(printf '%-24s %4ds wall %4ds CPU' "$1" $((SECONDS - stage_started)) $((cpu - stage_cpu)))")
    stage_started=$SECONDS stage_cpu=$cpu
}

# ---- Debian packages: promtool, prometheus and alertmanager for the rule and end-to-end tests,
# chromium for the live page, tmux for the terminal view, jsonnet for the monitoring mixin
missing=()
command -v promtool >/dev/null || missing+=(prometheus)
command -v prometheus-alertmanager >/dev/null || command -v alertmanager >/dev/null || missing+=(prometheus-alertmanager)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)  # the image's Debian base (deploy/image/build-image.sh)
command -v podman >/dev/null || missing+=(podman)  # builds and runs the image (tests/test_image.py)
command -v runc >/dev/null || missing+=(runc)  # podman's runtime here: crun refuses hybrid cgroup v1 hosts
command -v chromium >/dev/null || missing+=(chromium)  # the live page's browser test (tests/test_page_browser.py)
command -v tmux >/dev/null || missing+=(tmux)  # the terminal view's test (tests/test_top.py)
command -v jsonnet >/dev/null || missing+=(jsonnet)  # the monitoring mixin, rendered by the real jsonnet (tests/test_mixin.py)
if ((${#missing[@]})); then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    echo "tests/run.sh: installing Debian packages: ${missing[*]}"
    $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The Debian packages start their services; the tests run their own instances.
for service in prometheus prometheus-alertmanager prometheus-node-exporter; do
    if command -v systemctl >/dev/null && systemctl is-active --quiet "$service" 2>/dev/null; then
        systemctl stop "$service" || true
    fi
done
stage_done "apt packages"

# ---- the second Python
python313=$(bash tests/python313.sh)
echo "tests/run.sh: CPython 3.13 is $python313"
stage_done "CPython 3.13"

# ---- one virtual environment per Python
fresh_venv() {  # fresh_venv <python> <folder>: a virtual environment of that Python's version there
    local want
    want=$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if ! [ -x "$2/bin/python" ] || [ "$("$2/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "$want" ]; then
        rm -rf "$2"
        "$1" -m venv "$2"
    fi
}
make_venv() {  # make_venv <python> <folder>
    fresh_venv "$1" "$2"
    "$2/bin/python" -m pip install -q --disable-pip-version-check -e ".[test]"
}
venv=${GPUEFF_TEST_VENV:-.venv}
venv313=${GPUEFF_TEST_VENV313:-.venv-3.13}
make_venv python3 "$venv"
make_venv "$python313" "$venv313"
# Python 3.10 (Ubuntu 22.04's) and 3.12 (the GPU machines' PyTorch images), from pyenv where present:
# their environments get the dependencies side by side (pip mostly waits on unpacking), then the
# project one at a time (two setuptools builds in one source folder would share its egg-info).
python310=${GPUEFF_PYTHON310:-$(ls -d "${PYENV_ROOT:-/root/.pyenv}"/versions/3.10.*/bin/python3 2>/dev/null | tail -n 1 || true)}
python312=${GPUEFF_PYTHON312:-$(ls -d "${PYENV_ROOT:-/root/.pyenv}"/versions/3.12.*/bin/python3 2>/dev/null | tail -n 1 || true)}
"$venv/bin/python" -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["test"]))' >"$logs/requirements.txt"
dependencies_of() {  # dependencies_of <python> <folder>: the environment and what the project needs, not the project
    fresh_venv "$1" "$2"
    "$2/bin/python" -m pip install -q --disable-pip-version-check -r "$logs/requirements.txt"
}
closing=()
everyday=()
[ -n "$python310" ] && everyday+=(.venv-3.10) || closing+=("CPython 3.10: NOT RUN (no pyenv 3.10 here; set GPUEFF_PYTHON310)")
[ -n "$python312" ] && everyday+=(.venv-3.12) || closing+=("CPython 3.12: NOT RUN (no pyenv 3.12 here; set GPUEFF_PYTHON312)")
venv_jobs=()
[ -z "$python310" ] || { dependencies_of "$python310" .venv-3.10 & venv_jobs+=($!); }
[ -z "$python312" ] || { dependencies_of "$python312" .venv-3.12 & venv_jobs+=($!); }
for job in "${venv_jobs[@]}"; do wait "$job"; done
for folder in "${everyday[@]}"; do "$folder/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .; done
stage_done "virtual environments"

# ---- static checks, once
status=0 static_ok=1
"$venv/bin/ruff" check . || static_ok=0
"$venv/bin/mypy" || static_ok=0
((static_ok)) || status=1
stage_done "ruff and mypy"

# ---- packaging: the container image, built by podman from the Dockerfile on a Debian base made by
# mmdebstrap (tests/test_image.py runs it), and a pipx install of the wheel on Ubuntu 22.04's
# Python 3.10 where this machine has one (docs/bare-metal.md)
if deploy/image/build-image.sh localhost/gpu-efficiency-exporter:test; then
    export GPUEFF_IMAGE=localhost/gpu-efficiency-exporter:test
else
    closing+=("container image: FAILED (deploy/image/build-image.sh, see above)"); status=1
fi
stage_done "container image"
bash tests/packaging.sh "$venv/bin/python" "${python310:-$venv/bin/python}" \
    || { closing+=("pipx install: FAILED (tests/packaging.sh, see above)"); status=1; }
stage_done "pipx install"

# ---- the whole suite on each Python
report() {  # report <label> <log> <pytest exit code>: the closing line, and the status
    closing+=("$1: $(grep -v '^$' "$2" | tail -n 1)")
    case $3 in
        0) ;;
        5) closing+=("$1: FAILED: pytest collected no tests (exit code 5)"); status=1 ;;
        *) closing+=("$1: FAILED (pytest exit code $3)"); status=1 ;;
    esac
}
label_of() { "$1/bin/python" -c 'import platform; print(platform.python_implementation(), platform.python_version())'; }
suite() {  # suite <venv> [pytest arguments]
    local folder=$1 label rc
    shift
    label=$(label_of "$folder")
    echo "tests/run.sh: the suite on $label"
    set +e
    "$folder/bin/python" -m pytest --durations=15 "$@" 2>&1 | tee "$logs/pytest.log"
    rc=${PIPESTATUS[0]}
    set -e
    report "$label" "$logs/pytest.log" "$rc"
}
# The load test's 100 scrapers run 20 s on python3 and on 3.13 (the test's own default is the
# issue's 60 s; GPUEFF_LOAD_SECONDS wins), to keep the whole command under 15 minutes on 2 cores.
GPUEFF_LOAD_SECONDS=${GPUEFF_LOAD_SECONDS:-20} suite "$venv" "$@"
stage_done "suite on python3"
# On 3.13 the end-to-end tests are left out: they drive the same outside programs (Prometheus,
# Alertmanager, promtool, Helm, Chromium, the image build) against the same daemon as on python3.
GPUEFF_LOAD_SECONDS=${GPUEFF_LOAD_SECONDS:-20} suite "$venv313" -m "not e2e" "$@"
stage_done "suite on CPython 3.13"
# Python 3.10 (Ubuntu 22.04's) and 3.12 (the GPU machines' PyTorch images): the suite without the slow
# and end-to-end tests, which exercise the same code as on 3.11 and 3.13 and would add minutes
# (docs/bare-metal.md, "Python versions"); mypy checks the package against 3.10's standard library above.
# Those tests time nothing and mostly wait (about 50 s of CPU in 140 s), so the two run side by side.
pids=()
for folder in "${everyday[@]}"; do
    echo "tests/run.sh: the suite without slow and e2e tests on $(label_of "$folder") (its output follows when it ends)"
    "$folder/bin/python" -m pytest -p no:cacheprovider --durations=15 -m "not slow and not e2e" "$@" >"$logs/${folder#.}.log" 2>&1 &
    pids+=($!)
done
for i in "${!everyday[@]}"; do
    set +e
    wait "${pids[$i]}"
    rc=$?
    set -e
    cat "$logs/${everyday[$i]#.}.log"
    report "$(label_of "${everyday[$i]}")" "$logs/${everyday[$i]#.}.log" "$rc"
done
stage_done "suites on 3.10 and 3.12"

echo
echo "tests/run.sh: time per stage"
printf '  %s\n' "${timings[@]}"
cpu_seconds
printf '  %-24s %4ds wall %4ds CPU (load average now %s)\n' "total" $((SECONDS - started)) "$cpu" "$(cut -d' ' -f1-3 /proc/loadavg)"
((static_ok)) || echo "tests/run.sh: FAILED: ruff or mypy (see above)"
printf 'tests/run.sh: %s\n' "${closing[@]}"
exit "$status"
