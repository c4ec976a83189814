#!/bin/sh
# The Llama-style benchmark model (bench/gpu_models.py's Llama: 8 layers of width 2048, 16 heads
# sharing 4 key/value heads, SwiGLU, RMSNorm, rotary positions, sequence 2048, batch 4; 492M
# parameters), the half that runs here: exported with Debian's PyTorch 1.13 (batch dim symbolic,
# traced at batch 1: the trace's forward on this CPU takes many minutes, so the export is kept)
# and compiled for sm_90 with bench/gpu_build.sh's flags, without weights. On the device:
#   python3 bench/gpu_train.py bench/out/llama llama
# Usage: bench/gpu_llama_build.sh [SGC]   (from the project root)
set -eu
sgc=${1:-build/driver/sgc}
out=bench/out/llama
mkdir -p "$out"
[ -f "$out/llama.onnx" ] || /usr/bin/python3 - "$out" <<'PY'
import os, sys, warnings
import torch
sys.path.insert(0, "bench")
import gpu_models as gm
warnings.filterwarnings("ignore")
model = gm.make("llama", explicit=True)
with torch.no_grad():
    torch.onnx.export(model, gm.batch("llama", rows=1), os.path.join(sys.argv[1], "llama.onnx"), input_names=["idx", "tgt"],
                      output_names=["loss"], opset_version=17, do_constant_folding=False, dynamic_axes={n: {0: "B"} for n in ("idx", "tgt")},
                      training=torch.onnx.TrainingMode.TRAINING)
PY
"$sgc" compile "$out/llama.onnx" -o "$out/llama.so" --dim B=4 --optimizer adamw --lr 1e-4 --weight-decay 0.01 --precision bf16 \
  --weights none --target sm_90 --stats 2> "$out/llama.stats"
xz -1 -T2 -k -f "$out/llama.so"
ls -l "$out"/llama.so*
sha256sum "$out"/llama.so | cut -c1-12,65- # as gpu_train.py prints it
