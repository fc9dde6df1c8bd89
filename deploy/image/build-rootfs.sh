#!/usr/bin/env bash
# Builds the container image's root file system without a container engine, from the same
# inputs as the Dockerfile: Debian 13 (trixie) minbase with deploy/image/packages.txt (what the
# Dockerfile's pinned debian:trixie-slim base plus its apt-get install hold), the exporter's wheel
# and the pinned wheels of deploy/image/constraints.txt, installed by deploy/image/install-exporter.sh
# (the script the Dockerfile runs) inside the tree with chroot. tests/test_image.py then runs the
# daemon's demo in it as the image's user and checks what the image promises.
#   deploy/image/build-rootfs.sh OUT_DIR        (as root: mmdebstrap and chroot)
# Needs mmdebstrap (Debian package) and the project's virtual environment with `build` ($PYTHON,
# default .venv/bin/python). The Debian part is cached in $GPUEFF_IMAGE_CACHE (default
# .image-cache/) for a week, keyed by packages.txt; the wheels come from pip's cache.
set -euo pipefail
cd "$(dirname "$0")/../.."

out=${1:?usage: deploy/image/build-rootfs.sh OUT_DIR}
python=${PYTHON:-.venv/bin/python}
cache=${GPUEFF_IMAGE_CACHE:-.image-cache}
suite=trixie
mirror=${GPUEFF_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$cache"

# ---- the Debian base: minbase, the runtime packages, and the slim image's exclusions
packages=$(xargs <deploy/image/packages.txt)
key=$(printf '%s\n' "$suite" "$packages" "$(sed -n '/^excludes=/,/^)/p' "$0")" | sha256sum | cut -c1-16)
base="$cache/debian-$suite-$key.tar"
excludes=(
    # what debian:*-slim leaves out (debuerreotype's slimify list)
    '/usr/share/doc/*' '/usr/share/info/*' '/usr/share/linda/*' '/usr/share/lintian/overrides/*'
    '/usr/share/locale/*' '/usr/share/man/*' '/usr/share/groff/*'
)
find "$cache" \( -name 'debian-*.tar' -mtime +7 -o -name '*.partial' \) -delete
if [ ! -f "$base" ]; then
    echo "build-rootfs.sh: building the Debian $suite base ($packages) into $base" >&2
    dpkg_options=()
    for pattern in "${excludes[@]}"; do dpkg_options+=(--dpkgopt="path-exclude=$pattern"); done
    dpkg_options+=(--dpkgopt='path-include=/usr/share/doc/*/copyright')
    mmdebstrap --variant=minbase --mode=root --format=tar "${dpkg_options[@]}" \
        --include="${packages// /,}" "$suite" "$base.partial" "$mirror" >"$cache/mmdebstrap.log" 2>&1 \
        || { tail -30 "$cache/mmdebstrap.log" >&2; exit 1; }
    mv "$base.partial" "$base"
fi

# ---- the wheels: the exporter's, built from this tree, and the pinned dependencies for CPython 3.13
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m build --wheel --outdir "$work/wheels" . >"$work/build.log" 2>&1 || { tail -20 "$work/build.log" >&2; exit 1; }
platforms=()
for tag in manylinux_2_41_x86_64 manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 any; do platforms+=(--platform "$tag"); done
"$python" -m pip download --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
    --python-version 3.13 --implementation cp --abi cp313 --abi abi3 --abi none "${platforms[@]}" \
    --dest "$work/wheels" -r <(grep -v '^#' deploy/image/constraints.txt) 2> >(grep -v "^WARNING: Location" >&2)

# ---- the root file system: the base, then install-exporter.sh inside it
rm -rf "$out"
mkdir -p "$out"
tar -xf "$base" -C "$out"
mkdir -p "$out/tmp/image" "$out/tmp/wheels"
cp deploy/image/install-exporter.sh "$out/tmp/image/"
cp "$work"/wheels/*.whl "$out/tmp/wheels/"
chroot "$out" /bin/sh /tmp/image/install-exporter.sh /tmp/wheels
rm -rf "$out/tmp/image" "$out/tmp/wheels"
echo "build-rootfs.sh: $out ($(du -sh "$out" | cut -f1))" >&2
