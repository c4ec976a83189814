#!/bin/sh
# Compiles the real-model suite for the GPU check: each model's legacy and
# dynamo (optimize=False) export with --precision bf16 for the CPU and sm_90,
# packed with its batches and PyTorch's losses into OUT (xz: a device call
# carries 64 MiB), and each model's TorchScript archive saved by torch 2.11.
# Run check_gpu_models.py OUT on the GPU machine.
# Usage: tests/models/gpu_build.sh SGC WORKDIR OUT [EXPORT ...]
#   WORKDIR: train_models.py's, with the unpacked fixtures; EXPORTs: which to build
#   (default: legacy dynamo_noopt torchscript).
set -eu
sgc=$1 work=$2 out=$3
shift 3
exports=${*:-legacy dynamo_noopt torchscript}
mkdir -p "$out"
for m in gpt2 gpt_neox opt gemma bloom phi3 falcon distilbert gpt2_h64 llama_h128 llama qwen2 bert t5 vit resnet18 mobilenet_v3 efficientnet_b0 shufflenet_v2; do
  [ -f "$work/$m.json" ] || continue # not unpacked: train_models.py unpacks what it runs
  lr=$(python3 -c "import json; print(json.load(open('$work/$m.json'))['lr'])")
  for e in $exports; do
    model=$work/$m.$e.onnx
    [ "$e" != torchscript ] || model=$work/$m.torch-2.11.0.pt
    [ -f "$model" ] || continue
    "$sgc" compile "$model" -o "$out/$m.$e.so" --target cpu,sm_90 --precision bf16 --optimizer adamw --lr "$lr" --weight-decay 0.01
    xz -f -T2 "$out/$m.$e.so"
  done
  cp "$work/$m.json" "$out/"
  cp "$(ls "$work/$m".*.safetensors | grep -v '\.data\.' | head -1)" "$out/$m.inputs.safetensors"
done
cp "$(dirname "$0")/check_gpu_models.py" "$(dirname "$0")/../../samples/train_ctypes.py" "$out/"
cp -r "$(dirname "$0")/../../python/sgc" "$out/" # train_ctypes.py takes the ABI's structs from the package
# PyTorch's own bf16 runs on the H200 (torch_bf16.py), the yardstick of the chaotic networks.
[ ! -f "$(dirname "$0")/fixtures/torch_bf16.json" ] || cp "$(dirname "$0")/fixtures/torch_bf16.json" "$out/"
