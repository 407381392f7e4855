#!/bin/sh
# Make sure the portable llama-cpp-python wheel is in the wheelhouse; build it once if not.
#
#   scripts/llama_wheel.sh PYTHON WHEELHOUSE VERSION "CMAKE_ARGS"
#
# pip's own wheel cache is keyed by the sdist, not by the build flags: a machine that once
# built llama.cpp for its own CPU (-march=native: AVX-512, AMX) would keep installing that
# wheel. So the wheel is built here with pip's cache off, into a folder whose name carries
# the version and the baseline, and it enters that folder only after its machine code was
# checked (modelserver/portability.py): nothing beyond AVX2.
set -eu
PYTHON="$1"; WHEELHOUSE="$2"; VERSION="$3"; FLAGS="$4"
if ls "$WHEELHOUSE"/llama_cpp_python-"$VERSION"-*.whl >/dev/null 2>&1; then
    exit 0
fi
echo "Building llama-cpp-python $VERSION for any x86-64 CPU with AVX2 ($FLAGS): about 7 minutes on 2 cores, once per machine"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
CMAKE_ARGS="$FLAGS" "$PYTHON" -m pip wheel --quiet --no-cache-dir --no-deps --no-binary llama-cpp-python \
    -w "$scratch" "llama-cpp-python==$VERSION"
"$PYTHON" -m modelserver.portability "$scratch"/llama_cpp_python-*.whl || {
    echo "the built wheel holds instructions beyond AVX2: not installed" >&2
    exit 1
}
mkdir -p "$WHEELHOUSE"
mv "$scratch"/llama_cpp_python-*.whl "$WHEELHOUSE"/
