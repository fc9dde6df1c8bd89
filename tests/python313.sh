#!/usr/bin/env bash
# Prints the path of a CPython 3.13 for the test command's second suite, on stdout; progress goes to stderr.
#   1. $GPUEFF_PYTHON313, when set;
#   2. one this clone built before (.python-3.13/, git-ignored);
#   3. a pyenv 3.13 ($PYENV_ROOT or /root/.pyenv);
#   4. else (or with GPUEFF_BUILD_PYTHON=1) it builds one into .python-3.13/ from the source package
#      python3.13 of Debian's trixie suite, fetched with apt-get source through a separate
#      Dir::State::Lists/SourceList/SourceParts, so the machine's own package lists stay untouched.
#      No prebuilt 3.13 can be downloaded where CI runs; the build takes a few minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=$PWD/.python-3.13
works() { [ -x "$1" ] && "$1" -c 'import sys, ssl, sqlite3, ctypes, venv, ensurepip; sys.exit(sys.version_info[:2] != (3, 13))' 2>/dev/null; }

if [ "${GPUEFF_BUILD_PYTHON:-0}" != 1 ]; then
    if [ -n "${GPUEFF_PYTHON313:-}" ]; then
        works "$GPUEFF_PYTHON313" || { echo "tests/python313.sh: GPUEFF_PYTHON313=$GPUEFF_PYTHON313 is not a working CPython 3.13" >&2; exit 1; }
        echo "$GPUEFF_PYTHON313"
        exit 0
    fi
    for candidate in "$prefix/bin/python3.13" "${PYENV_ROOT:-/root/.pyenv}"/versions/3.13.*/bin/python3; do
        if works "$candidate"; then
            echo "$candidate"
            exit 0
        fi
    done
fi

sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
# What the suite's standard modules need (ssl, ctypes, sqlite3, zlib, bz2, lzma); the rest is left out.
build_packages=(build-essential pkg-config xz-utils libssl-dev zlib1g-dev libffi-dev libsqlite3-dev libbz2-dev liblzma-dev)
missing=()
for package in "${build_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
    echo "tests/python313.sh: installing build dependencies: ${missing[*]}" >&2
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/sourceparts" "$work/cache/archives/partial" "$work/src"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" >"$work/sources.list"
apt_options=(
    -o "Dir::State::Lists=$work/lists" -o "Dir::Etc::SourceList=$work/sources.list"
    -o "Dir::Etc::SourceParts=$work/sourceparts" -o "Dir::Cache=$work/cache" -o "APT::Sandbox::User=root"
)
echo "tests/python313.sh: fetching python3.13 from Debian trixie's sources" >&2
apt-get -qq "${apt_options[@]}" update >&2
(cd "$work/src" && apt-get -qq "${apt_options[@]}" source --download-only python3.13 >&2)
# The .orig tarball is the unpatched upstream release (checked against the signed Sources index);
# Debian's patches serve its own /usr layout, not a private prefix.
tarball=$(ls "$work"/src/python3.13_*.orig.tar.xz)
tar -xJf "$tarball" -C "$work/src"
source_dir=$(ls -d "$work"/src/Python-3.13.*/)
echo "tests/python313.sh: building $(basename "$source_dir") into $prefix" >&2
rm -rf "$prefix"
(
    cd "$source_dir"
    ./configure --prefix="$prefix" --disable-test-modules --without-ensurepip >"$work/configure.log" 2>&1 \
        || { tail -30 "$work/configure.log" >&2; exit 1; }
    make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -40 "$work/make.log" >&2; exit 1; }
    make install >"$work/install.log" 2>&1 || { tail -40 "$work/install.log" >&2; exit 1; }
)
works "$prefix/bin/python3.13" || { echo "tests/python313.sh: the build in $prefix does not work (ssl, sqlite3, ctypes, venv)" >&2; exit 1; }
echo "$prefix/bin/python3.13"
