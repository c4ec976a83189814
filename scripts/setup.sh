#!/usr/bin/env bash
# Installs what sgc needs from Debian 12's packages and configures the build
# folder. Idempotent and quiet: prints nothing when everything is present.
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache pkg-config
  llvm-19-dev llvm-19-tools clang-19 libclang-rt-19-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  libdlpack-dev nlohmann-json3-dev libgtest-dev
  python3-onnx python3-torch python3-numpy
  python3-pip python3-setuptools python3-wheel
  openmpi-bin libopenmpi-dev
  xz-utils libzip-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  [ "$(id -u)" = 0 ] || { echo "setup: run as root to install packages" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
