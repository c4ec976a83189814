#!/bin/sh
# The half of the decoding benchmark that runs here, without a GPU: exports the
# decoders of tests/decode/gpt_decoder.py with their key/value cache (attn: one
# layer of 32 heads of 128; gpt2: GPT-2 small's sizes) and compiles each with
# --mode decode for sm_90 (bf16, 16-token pages, no weights: the device side
# loads PyTorch's), packed as .so.xz. Then, on the device:
#   python3 bench/gpu_decode.py bench/out/decode
# Usage: bench/gpu_decode_build.sh [SGC]   (from the project root)
set -eu
sgc=${1:-build/driver/sgc}
out=bench/out/decode
mkdir -p "$out"
for size in attn gpt2; do
  [ -f "$out/$size.onnx" ] || /usr/bin/python3 tests/decode/gpt_decoder.py export "$out/$size.onnx" 0 $size
done
# attn: 64 sequences of 4096 tokens (prefilled 256 tokens a step); gpt2: 64 of its 1024.
"$sgc" compile "$out/attn.onnx" -o "$out/attn.so" --mode decode --precision bf16 --kv-block-size 16 --max-seqs 64 --max-context 4096 \
  --max-tokens 256 --weights none --target sm_90 --stats
"$sgc" compile "$out/gpt2.onnx" -o "$out/gpt2.so" --mode decode --precision bf16 --kv-block-size 16 --max-seqs 64 --max-context 1024 \
  --max-tokens 64 --weights none --target sm_90 --stats
# Hugging Face GPT-2 as a plain causal LM (bench/models/hf_gpt2.onnx, from bench/export_hf_gpt2.py):
# its parameters are external data left on the device, zeros here (not embedded: --weights none).
# 64 tokens a step (prompts prefill in two steps), and 1024 with a token bucket of 64 (the default
# at --max-seqs 64): prompts prefill together, 8 of 128 tokens a step, and decoding steps run the
# bucket.
cp bench/models/hf_gpt2.onnx "$out/hf_gpt2.onnx"
truncate -s "$(sed -n 's/.*"data_bytes": \([0-9]*\).*/\1/p' bench/models/hf_gpt2.json)" "$out/hf_gpt2.onnx.data"
for t in 64 1024; do
  name=hf_gpt2; [ $t = 64 ] || name=hf_gpt2_t$t
  "$sgc" compile "$out/hf_gpt2.onnx" -o "$out/$name.so" --mode decode --precision bf16 --kv-block-size 16 --max-seqs 64 --max-context 1024 \
    --max-tokens $t --weights none --target sm_90 --stats
done
for size in attn gpt2 hf_gpt2 hf_gpt2_t1024; do xz -1 -k -f "$out/$size.so"; done
ls -la "$out"/*.so.xz
