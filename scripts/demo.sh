#!/usr/bin/env bash
# The main job on the bundled sample: installs what is missing, builds sgc,
# then imports samples/mlp.onnx, prints its summary and IR, and runs it on the
# reference interpreter.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
sgc="${SGC_BUILD_DIR:-$root/build}/driver/sgc"
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
set -x
"$sgc" inspect "$root/samples/mlp.onnx"
"$sgc" compile "$root/samples/mlp.onnx" --emit=ir
"$sgc" run "$root/samples/mlp.onnx" --inputs "$root/samples/mlp_inputs.safetensors" -o "$out/out.safetensors"
"$sgc" inspect "$out/out.safetensors"
