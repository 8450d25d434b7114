#!/usr/bin/env bash
# The image of Dockerfile.privileged, built with podman on this host (as root), with no image
# registry and no index reached from inside the build:
#
#   scripts/container-image.sh              # localhost/iotrace:latest (and :src-HASH)
#   scripts/container-image.sh --tag        # only prints localhost/iotrace:src-HASH
#
# 1. the base image from Debian's packages (scripts/container-base.sh), when it is missing;
# 2. the wheels of iotrace's dependencies (pyproject.toml, with the [gpu] extra, and what builds
#    its wheel) downloaded here
#    by this host's pip, for Python 3.11 (the base's), into build/container/wheels;
# 3. podman build, those wheels mounted at /wheels and pip told to use no index; the build stage
#    apt-gets its compiler from the base's Debian mirror.
# The image is also tagged src-HASH, HASH being the content of what the Dockerfile copies and of
# the scripts that build it (as the working tree has them, tracked or not):
# tests/test_kernel_container.py builds only when no image of these is there.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${IOTRACE_BASE_IMAGE:-localhost/iotrace-base:bookworm}
PY=$(command -v .venv/bin/python || command -v python3)

INPUTS=(Dockerfile.privileged Makefile pyproject.toml bpf tracer scripts/abi_layout.py
        scripts/container-base.sh scripts/container-image.sh)
src_hash=$(git ls-files -z --cached --others --exclude-standard -- "${INPUTS[@]}" \
    | sort -z | xargs -0 sha256sum 2>/dev/null | sha256sum | cut -c1-12)
tag=localhost/iotrace:src-$src_hash
if [ "${1:-}" = --tag ]; then
    echo "$tag"
    exit 0
fi

scripts/container-base.sh

wheels=build/container/wheels
mkdir -p "$wheels"
"$PY" - > build/container/requirements.txt <<'PYEOF'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
build = tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["gpu"] + build))
PYEOF
"$PY" -m pip download -q --only-binary=:all: --python-version 3.11 -d "$wheels" \
    -r build/container/requirements.txt

# --network=host: the build stage's apt-get reaches the mirror without a container network.
scripts/podman.sh build -f Dockerfile.privileged --network=host \
    --build-arg BASE="$BASE" --build-arg PIP_NO_INDEX=1 -v "$PWD/$wheels:/wheels:ro" \
    -t "$tag" -t localhost/iotrace:latest .
# The images of earlier trees go (their layers are shared with this one's, or are garbage).
podman images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/iotrace:src-' \
    | grep -vx "$tag" | xargs -r podman rmi >/dev/null || true
echo "built $tag (also localhost/iotrace:latest)"
