#!/usr/bin/env bash
# The main job on the bundled sample: installs what is missing, builds sgc,
# then imports samples/mlp.onnx, prints its summary, runs it on the
# reference interpreter, compiles samples/mlp_train.onnx (the MLP with a loss)
# into train.so and trains it for 20 steps through its C ABI.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
sgc="${SGC_BUILD_DIR:-$root/build}/driver/sgc"
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
set -x
"$sgc" inspect "$root/samples/mlp.onnx"
"$sgc" run "$root/samples/mlp.onnx" --inputs "$root/samples/mlp_inputs.safetensors" -o "$out/out.safetensors"
"$sgc" inspect "$out/out.safetensors"
"$sgc" compile "$root/samples/mlp_train.onnx" -o "$out/train.so" --optimizer adamw --lr 1e-2 --stats
"$sgc" train "$out/train.so" --data "$root/samples/mlp_train_data.safetensors" --steps 20 --save "$out/checkpoint.safetensors"
