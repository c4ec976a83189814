#!/bin/sh
# Compiles the real-model suite for the GPU check: each model's legacy and
# dynamo (optimize=False) export with --precision bf16 for the CPU and sm_90,
# packed with its batches and PyTorch's losses into OUT (xz: a device call
# carries 64 MiB). Run check_gpu_models.py OUT on the GPU machine.
# Usage: tests/models/gpu_build.sh SGC WORKDIR OUT   (WORKDIR: train_models.py's, with the unpacked fixtures)
set -eu
sgc=$1 work=$2 out=$3
mkdir -p "$out"
for m in gpt2 llama qwen2 bert t5 vit resnet18 mobilenet_v3 efficientnet_b0 shufflenet_v2; do
  lr=$(python3 -c "import json; print(json.load(open('$work/$m.json'))['lr'])")
  for e in legacy dynamo_noopt; do
    [ -f "$work/$m.$e.onnx" ] || continue
    "$sgc" compile "$work/$m.$e.onnx" -o "$out/$m.$e.so" --target cpu,sm_90 --precision bf16 --optimizer adamw --lr "$lr" --weight-decay 0.01
    xz -f -T2 "$out/$m.$e.so"
  done
  cp "$work/$m.json" "$out/"
  cp "$(ls "$work/$m".*.safetensors | grep -v '\.data\.' | head -1)" "$out/$m.inputs.safetensors"
done
cp "$(dirname "$0")/check_gpu_models.py" "$(dirname "$0")/../../samples/train_ctypes.py" "$out/"
cp -r "$(dirname "$0")/../../python/sgc" "$out/" # train_ctypes.py takes the ABI's structs from the package
# PyTorch's own bf16 runs on the H200 (torch_bf16.py), the yardstick of the chaotic networks.
[ ! -f "$(dirname "$0")/fixtures/torch_bf16.json" ] || cp "$(dirname "$0")/fixtures/torch_bf16.json" "$out/"
