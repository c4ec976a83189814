#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "${SGC_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j2 "$@"
