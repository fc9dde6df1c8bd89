#!/usr/bin/env bash
# Builds the container image's root file system without a container engine, by running the
# Dockerfile's own runtime stage: a Debian 13 (trixie) minbase tree made by mmdebstrap, with what
# the slim images leave out left out (what debian:trixie-slim, the stage's base, holds), then the
# stage's COPY (deploy/image/ files) and its RUN lines, read from the Dockerfile, run inside the tree
# with chroot: the apt-get install of packages.txt, then install-exporter.sh with the wheels where
# the Dockerfile's RUN --mount puts them. The wheels are the ones the wheels stage makes: this tree's
# wheel (python -m build) and the pinned dependencies of constraints.txt for CPython 3.13.
# tests/test_image.py then runs the daemon's demo in the result as the image's user.
#   deploy/image/build-rootfs.sh OUT_DIR        (as root: mmdebstrap and chroot)
# Needs mmdebstrap (Debian package), network to Debian's mirror and PyPI, and the project's virtual
# environment with `build` ($PYTHON, default .venv/bin/python). The tree after the apt-get RUN is
# cached in $GPUEFF_IMAGE_CACHE (default .image-cache/) for a week, keyed by that RUN line,
# packages.txt and the slim exclusions; the wheels come from pip's cache.
set -euo pipefail
cd "$(dirname "$0")/../.."

out=${1:?usage: deploy/image/build-rootfs.sh OUT_DIR}
python=${PYTHON:-.venv/bin/python}
cache=${GPUEFF_IMAGE_CACHE:-.image-cache}
suite=trixie
mirror=${GPUEFF_DEBIAN_MIRROR:-http://deb.debian.org/debian}
share=usr/local/share/gpu-efficiency-exporter  # where the runtime stage's COPY puts deploy/image/ files
# RUN lines get the environment docker build gives them, not this shell's (PIP_*, proxies, ...).
in_tree() { chroot "$1" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root /bin/sh -c "$2"; }
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- the runtime stage's RUN lines, from the Dockerfile (the --mount flag is done here by hand)
"$python" - "$work" <<'PY'
import re, sys
from pathlib import Path
text = re.sub(r"\\\n\s*", " ", Path("Dockerfile").read_text())
lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
start = next(i for i, line in enumerate(lines) if re.match(r"FROM \S+ AS runtime$", line))
stage = []
for line in lines[start + 1:]:
    if line.startswith("FROM "):
        break
    stage.append(line)
runs = [line[4:] for line in stage if line.startswith("RUN ")]
copies = [line for line in stage if line.startswith("COPY ")]
assert copies == ["COPY deploy/image/packages.txt deploy/image/install-exporter.sh /usr/local/share/gpu-efficiency-exporter/"], copies
assert len(runs) == 2 and runs[1].startswith("--mount=type=bind,from=wheels,source=/wheels,target=/wheels "), runs
Path(sys.argv[1], "run-apt").write_text(runs[0])
Path(sys.argv[1], "run-install").write_text(runs[1].split(" ", 1)[1])
PY

# ---- the tree after the apt-get RUN: minbase, the slim exclusions, the COPY, the RUN (cached)
excludes=(
    # what debian:*-slim leaves out (debuerreotype's slimify list)
    '/usr/share/doc/*' '/usr/share/info/*' '/usr/share/linda/*' '/usr/share/lintian/overrides/*'
    '/usr/share/locale/*' '/usr/share/man/*' '/usr/share/groff/*'
)
key=$(cat "$0" "$work/run-apt" deploy/image/packages.txt | sha256sum | cut -c1-16)  # this script, the RUN, the packages
base="$cache/debian-$suite-$key.tar"
find "$cache" \( -name 'debian-*.tar' -mtime +7 -o -name '*.partial' \) -delete
if [ ! -f "$base" ]; then
    echo "build-rootfs.sh: building the Debian $suite tree of the runtime stage's apt-get RUN into $base" >&2
    dpkg_options=()
    for pattern in "${excludes[@]}"; do dpkg_options+=(--dpkgopt="path-exclude=$pattern"); done
    dpkg_options+=(--dpkgopt='path-include=/usr/share/doc/*/copyright')
    mmdebstrap --variant=minbase --mode=root --format=directory "${dpkg_options[@]}" \
        "$suite" "$work/tree" "$mirror" >"$cache/mmdebstrap.log" 2>&1 \
        || { tail -30 "$cache/mmdebstrap.log" >&2; exit 1; }
    # debian:*-slim's apt settings (debuerreotype's): drop downloaded packages and caches after
    # each install, and no translated package descriptions.
    cat >"$work/tree/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT
    echo 'Acquire::Languages "none";' >"$work/tree/etc/apt/apt.conf.d/docker-no-languages"
    mkdir -p "$work/tree/$share"
    cp deploy/image/packages.txt deploy/image/install-exporter.sh "$work/tree/$share/"
    cp /etc/resolv.conf "$work/tree/etc/resolv.conf"  # apt-get update needs a resolver, as docker build gives one
    in_tree "$work/tree" "$(cat "$work/run-apt")" >>"$cache/mmdebstrap.log" 2>&1 \
        || { tail -30 "$cache/mmdebstrap.log" >&2; exit 1; }
    : >"$work/tree/etc/resolv.conf"
    tar -C "$work/tree" -cf "$base.partial" .
    mv "$base.partial" "$base"
    rm -rf "$work/tree"
fi

# ---- the wheels: the exporter's, built from this tree, and the pinned dependencies for CPython 3.13
"$python" -m build --wheel --outdir "$work/wheels" . >"$work/build.log" 2>&1 || { tail -20 "$work/build.log" >&2; exit 1; }
platforms=()
for tag in manylinux_2_41_x86_64 manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 any; do platforms+=(--platform "$tag"); done
"$python" -m pip download --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
    --python-version 3.13 --implementation cp --abi cp313 --abi abi3 --abi none "${platforms[@]}" \
    --dest "$work/wheels" -r <(grep -v '^#' deploy/image/constraints.txt) 2>&1 | { grep -v "^WARNING: Location" || true; } >&2

# ---- the root file system: the cached tree, then the install RUN with the wheels at /wheels
rm -rf "$out"
mkdir -p "$out"
tar -xf "$base" -C "$out"
cp deploy/image/packages.txt deploy/image/install-exporter.sh "$out/$share/"
mkdir -p "$out/wheels"
cp "$work"/wheels/*.whl "$out/wheels/"
in_tree "$out" "$(cat "$work/run-install")"
rm -rf "$out/wheels"
echo "build-rootfs.sh: $out ($(du -sh "$out" | cut -f1))" >&2
