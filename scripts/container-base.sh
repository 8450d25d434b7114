#!/usr/bin/env bash
# The base image of Dockerfile.privileged made from Debian's packages, for hosts that reach a
# Debian mirror but no image registry:
#
#   scripts/container-base.sh [--force]     # as root; needs mmdebstrap and podman
#
# mmdebstrap installs Debian 12 (bookworm: Python 3.11, libbpf 1.1) with apt, python3 and its
# venv module, and libbpf1, into a tarball that `podman import` makes localhost/iotrace-base.
# Nothing is done when that image exists, unless --force. MIRROR overrides the Debian mirror.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IOTRACE_BASE_IMAGE:-localhost/iotrace-base:bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY=${SECURITY:-http://deb.debian.org/debian-security}
PACKAGES=python3,python3-venv,libbpf1,ca-certificates

if [ "${1:-}" != --force ] && scripts/podman.sh image exists "$IMAGE"; then
    echo "$IMAGE exists (--force makes it again)"
    exit 0
fi
for c in mmdebstrap podman; do
    command -v "$c" >/dev/null || { echo "error: $c is missing (apt-get install $c)" >&2; exit 1; }
done
mkdir -p build/container
tarball=build/container/base.tar
# The apt variant: the image's own apt-get can install the build stage's compiler.
mmdebstrap --variant=apt --include="$PACKAGES" bookworm "$tarball" \
    "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
    "deb $SECURITY bookworm-security main"
scripts/podman.sh import --quiet --change 'CMD ["/bin/bash"]' "$tarball" "$IMAGE" >/dev/null
rm -f "$tarball"
echo "$IMAGE made from Debian bookworm ($PACKAGES)"
