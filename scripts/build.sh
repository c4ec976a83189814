#!/usr/bin/env bash
# Configures (once) and builds sgc into build/ with Ninja and ccache.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SGC_BUILD_DIR:-$root/build}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache \
    ${SGC_CONFORMANCE:+-DSGC_CONFORMANCE="$SGC_CONFORMANCE"} >/dev/null
fi
cmake --build "$build" -- --quiet

# The fuzzers (tests/fuzz: the importer, the safetensors reader): their own build with clang-19 and sanitizers.
fuzz=$build/fuzz
if [ ! -f "$fuzz/build.ninja" ]; then
  CXX=clang++-19 cmake -S "$root/tests/fuzz" -B "$fuzz" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
fi
cmake --build "$fuzz" -- --quiet
