#!/bin/sh
# The half of the attention benchmark that runs here, without a GPU: exports
# causal self-attention alone (bench/gpu_models.py's Attention, written out as
# matmul, mask, softmax, matmul, which sgc fuses into FusedAttention) at the
# shapes of bench/gpu_models.py's ATTN (attn128g with grouped key/value heads) (and, unmasked, ATTN_FULL's) with Debian's PyTorch 1.13, and
# compiles each for sm_90 (bf16, SGD with a learning rate large enough for
# gpu_attention.py to read the gradient off one step, no weights), packed as .so.xz. Then, on
# the device:
#   python3 bench/gpu_attention.py bench/out/attention [attn64,attn128,attn128g,attn64full,attn128full]
# Usage: bench/gpu_attention_build.sh [SGC]   (from the project root)
set -eu
sgc=${1:-build/driver/sgc}
out=bench/out/attention
mkdir -p "$out"
for name in attn64 attn128 attn128g attn64full attn128full; do
  [ -f "$out/$name.onnx" ] || /usr/bin/python3 -c "import sys; sys.path.insert(0, 'bench'); import gpu_models as gm; gm.export_attention('$name', '$out/$name.onnx')"
done
flags="--optimizer sgd --lr 1e3 --precision bf16 --weights none --target sm_90"
"$sgc" compile "$out/attn64.onnx" -o "$out/attn64.so" --dim B=16 $flags
"$sgc" compile "$out/attn128.onnx" -o "$out/attn128.so" --dim B=4 $flags
"$sgc" compile "$out/attn128g.onnx" -o "$out/attn128g.so" --dim B=4 $flags
"$sgc" compile "$out/attn64full.onnx" -o "$out/attn64full.so" --dim B=4 $flags
"$sgc" compile "$out/attn128full.onnx" -o "$out/attn128full.so" --dim B=2 $flags
for name in attn64 attn128 attn128g attn64full attn128full; do xz -1 -k -f "$out/$name.so"; done
ls -la "$out"/*.so.xz
