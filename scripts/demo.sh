#!/usr/bin/env bash
# The main job on the bundled sample: installs what is missing, builds sgc,
# then imports samples/mlp.onnx, prints its summary and IR, runs it on the
# reference interpreter, and trains samples/mlp_train.onnx for 20 steps.
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
"$sgc" train "$root/samples/mlp_train.onnx" --data "$root/samples/mlp_train_data.safetensors" --steps 20 \
  --optimizer adamw --lr 1e-2 --save "$out/checkpoint.safetensors"
