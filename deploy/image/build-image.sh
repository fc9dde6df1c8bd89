#!/usr/bin/env bash
# Builds the container image from the repository's Dockerfile with podman, where no image registry
# is reachable: the Dockerfile's base (debian:trixie-slim) is stood in for by a Debian 13 minbase
# root file system made by mmdebstrap from Debian's packages, with what the slim images leave out
# left out, imported into podman and passed as the DEBIAN_IMAGE build argument. Everything after
# the FROM lines is the Dockerfile's own, run by the engine (docs/container-image.md).
#   deploy/image/build-image.sh TAG            (as root: mmdebstrap, podman with runc)
# Needs podman and runc (Debian packages), mmdebstrap, network to Debian's mirror and PyPI. The
# base's tarball is cached in $GPUEFF_IMAGE_CACHE (default .image-cache/) for a week, keyed by its
# recipe; podman's storage is its own ($GPUEFF_PODMAN, default below). Prints the image's size.
set -euo pipefail
cd "$(dirname "$0")/../.."

tag=${1:?usage: deploy/image/build-image.sh TAG}
cache=${GPUEFF_IMAGE_CACHE:-.image-cache}
mirror=${GPUEFF_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=trixie
# runc: crun refuses hybrid cgroup v1 hosts. overlay in a storage root of its own: vfs cannot serve
# RUN --mount=type=bind,from=<stage>, and a root once used with vfs refuses another driver.
read -r -a podman <<<"${GPUEFF_PODMAN:-podman --root /var/lib/containers/gpueff --runroot /run/containers/gpueff --storage-driver overlay --runtime runc}"
# Explicit limits: a process without CAP_SYS_RESOURCE may not raise them to the engine's defaults.
limits=(--ulimit nofile=1024:1024 --ulimit nproc=4096:4096)
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- the base: Debian 13 minbase, slimmed as debian:*-slim is (debuerreotype's exclusions and apt settings)
options=()
for pattern in /usr/share/doc/'*' /usr/share/info/'*' /usr/share/linda/'*' /usr/share/lintian/overrides/'*' \
    /usr/share/locale/'*' /usr/share/man/'*' /usr/share/groff/'*'; do
    options+=(--dpkgopt="path-exclude=$pattern")
done
options+=(--dpkgopt='path-include=/usr/share/doc/*/copyright')
# shellcheck disable=SC2016  # $1 is the hook's argument, expanded by mmdebstrap's shell
options+=(--customize-hook='printf "%s\n" "DPkg::Post-Invoke { \"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true\"; };" "APT::Update::Post-Invoke { \"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true\"; };" "Dir::Cache::pkgcache \"\";" "Dir::Cache::srcpkgcache \"\";" >"$1/etc/apt/apt.conf.d/docker-clean"')
# shellcheck disable=SC2016
options+=(--customize-hook='echo "Acquire::Languages \"none\";" >"$1/etc/apt/apt.conf.d/docker-no-languages"')
key=$(printf '%s\n' "$suite" "${options[@]}" | sha256sum | cut -c1-12)  # the recipe: a new one, a new base
base="$cache/debian-$suite-slim-$key.tar"
find "$cache" \( -name "debian-$suite-slim-*.tar" -mtime +7 -o -name '*.partial' \) -delete
if [ ! -f "$base" ]; then
    echo "build-image.sh: making the Debian $suite base with mmdebstrap into $base" >&2
    mmdebstrap --variant=minbase --mode=root --format=tar "${options[@]}" "$suite" "$base.partial" "$mirror" \
        >"$cache/mmdebstrap.log" 2>&1 || { tail -30 "$cache/mmdebstrap.log" >&2; exit 1; }
    mv "$base.partial" "$base"
fi
base_image="localhost/debian-$suite-slim:$key"
"${podman[@]}" image exists "$base_image" || "${podman[@]}" import --quiet "$base" "$base_image" >/dev/null

# ---- the image: pip in the build trusts this machine's certificate authorities (a proxy's, where
# one intercepts), mounted beside the image's own so that the ca-certificates package installs intact
printf '[global]\ncert = /run/host-ca/ca-certificates.crt\n' >"$work/pip.conf"
build() {  # build [podman build options]
    "${podman[@]}" build "${limits[@]}" \
        --volume /etc/ssl/certs:/run/host-ca:ro --volume "$work/pip.conf:/etc/pip.conf:ro" \
        --build-arg DEBIAN_IMAGE="$base_image" \
        --build-arg VERSION="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' gpueff/__init__.py)" \
        --build-arg REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
        "$@" --tag "$tag" . >"$work/build.log" 2>&1
}
# podman 4.3 (Debian 12's) cannot bind-mount a stage it took from its cache into a step that is not
# cached (containers/buildah#4375): the install step then finds no /wheels.
# That failure, and only that one, gets a second build without the cache.
if ! build; then
    grep -q "on host to bind mount into container" "$work/build.log" || { tail -40 "$work/build.log" >&2; exit 1; }
    echo "build-image.sh: podman could not mount the cached wheels stage (buildah#4375): building again without the cache" >&2
    build --no-cache || { tail -40 "$work/build.log" >&2; exit 1; }
fi
"${podman[@]}" image prune --force --filter until=168h >/dev/null  # untagged images and build layers older than a week
echo "build-image.sh: $tag, $("${podman[@]}" image inspect --format '{{.Size}}' "$tag" | awk '{ printf "%.0f MB", $1 / 1e6 }')" >&2
