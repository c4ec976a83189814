#!/bin/sh
# The half of the GPU benchmark that runs here, without a GPU: exports the two
# models of bench/gpu_models.py with Debian's PyTorch 1.13 (batch dim
# symbolic, traced at batch 2: a full-size CPU forward would take minutes)
# and compiles each with sgc for sm_90 (bf16 autocast, AdamW lr 1e-4, weight
# decay 0.01, as torch_peers.py trains) without weights: the device side loads
# the PyTorch model's initial weights. Then, on the device:
#   python3 bench/gpu_train.py bench/out
#   python3 bench/gpu_dp.py bench/out
#   python3 bench/gpu_scale.py bench/out   (two GPUs or more)
# Each library is also packed as .so.xz (under 1 MiB; a device call carries
# 64 MiB): carry those, and the scripts unpack them there.
# Usage: bench/gpu_build.sh [SGC]   (from the project root)
set -eu
sgc=${1:-build/driver/sgc}
out=bench/out
mkdir -p "$out"
[ -f "$out/mlp.onnx" ] && [ -f "$out/gpt.onnx" ] || /usr/bin/python3 - "$out" <<'PY'
import os, sys, warnings
import torch
sys.path.insert(0, "bench")
import gpu_models as gm
warnings.filterwarnings("ignore")
out = sys.argv[1]
for name, inputs in (("mlp", ["x", "y"]), ("gpt", ["idx", "tgt"])):
    model = gm.make(name, explicit=True)
    with torch.no_grad():
        torch.onnx.export(model, gm.batch(name, rows=2), os.path.join(out, name + ".onnx"), input_names=inputs, output_names=["loss"],
                          opset_version=17, do_constant_folding=False, dynamic_axes={n: {0: "B"} for n in inputs},
                          training=torch.onnx.TrainingMode.TRAINING)  # in eval mode the exporter ties equal initializers (the LayerNorms' ones)
PY
flags="--optimizer adamw --lr 1e-4 --weight-decay 0.01 --precision bf16 --weights none --target sm_90 --stats"
"$sgc" compile "$out/mlp.onnx" -o "$out/mlp.so" --dim B=8192 $flags 2> "$out/mlp.stats"
"$sgc" compile "$out/gpt.onnx" -o "$out/gpt.so" --dim B=16 $flags 2> "$out/gpt.stats"
# The same with the GELU outputs recomputed in the backward pass (less memory; gpu_train.py times it too).
"$sgc" compile "$out/gpt.onnx" -o "$out/gpt_rc.so" --dim B=16 $flags --recompute cheap 2> "$out/gpt_rc.stats"
# The classifier whole, not in row chunks (--classifier-chunk-mb 0): the chunks' cost and memory.
"$sgc" compile "$out/gpt.onnx" -o "$out/gpt_whole.so" --dim B=16 $flags --classifier-chunk-mb 0 2> "$out/gpt_whole.stats"
# The cost of data parallelism's machinery (bench/gpu_dp.py): GPT-2 small with its all-reduces.
"$sgc" compile "$out/gpt.onnx" -o "$out/gpt_dp.so" --dim B=16 $flags --data-parallel allreduce 2> "$out/gpt_dp.stats"
"$sgc" compile "$out/gpt.onnx" -o "$out/gpt_z1.so" --dim B=16 $flags --data-parallel zero1 --ranks 1 2> "$out/gpt_z1.stats"
# Scaling on two GPUs (bench/gpu_scale.py): ZeRO-1 shards for two ranks.
"$sgc" compile "$out/gpt.onnx" -o "$out/gpt_z1r2.so" --dim B=16 $flags --data-parallel zero1 --ranks 2 2> "$out/gpt_z1r2.stats"
for so in "$out"/*.so; do xz -1 -T2 -k -f "$so"; done
rm -f "$out"/*.onnx.data
ls -l "$out"/*.so
# The hashes gpu_train.py prints for the libraries it ran: a stale one shows as a different hash.
sha256sum "$out"/*.so | cut -c1-12,65-
