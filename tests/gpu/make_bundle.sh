#!/bin/sh
# Compiles the GPU test models (the bundled training sample, and the MLP, CNN
# and GPT of tests/training/torch_equivalence.py) for the CPU and sm_90 into
# DIR with their data, ready to carry to a GPU machine; and a small GPT whose
# rows fit GPU warps (export_warp_model.py), also with fused attention; and
# the decoders of the decoding test.
# Usage: make_bundle.sh SGC SOURCE_DIR MODELS_DIR OUT_DIR
set -eu
sgc=$1 src=$2 models=$3 out=$4
mkdir -p "$out"
"$sgc" compile "$src/samples/mlp_train.onnx" -o "$out/sample.so" --optimizer adamw --lr 1e-2 --target cpu,sm_90
cp "$src/samples/mlp_train_data.safetensors" "$out/sample_data.safetensors"
for m in mlp cnn gpt; do
  "$sgc" compile "$models/$m.onnx" -o "$out/$m.so" --optimizer adamw --lr 1e-2 --target cpu,sm_90
  "$sgc" compile "$models/$m.onnx" -o "$out/${m}_bf16.so" --optimizer adamw --lr 1e-2 --target cpu,sm_90 --precision bf16
  cp "$models/${m}_data.safetensors" "$out/"
  cp "$models/${m}_data.safetensors" "$out/${m}_bf16_data.safetensors"
done
/usr/bin/python3 "$src/tests/gpu/export_warp_model.py" "$src" "$out"
"$sgc" compile "$out/gptw.onnx" -o "$out/gptw.so" --optimizer adamw --lr 1e-2 --target cpu,sm_90
"$sgc" compile "$out/gptw.onnx" -o "$out/gptw_bf16.so" --optimizer adamw --lr 1e-2 --target cpu,sm_90 --precision bf16 --attention decomposed
cp "$out/gptw_data.safetensors" "$out/gptw_bf16_data.safetensors"
"$sgc" compile "$out/wide.onnx" -o "$out/wide.so" --optimizer adamw --lr 1e-3 --target cpu,sm_90
"$sgc" compile "$out/vocab.onnx" -o "$out/vocab.so" --optimizer adamw --lr 1e-3 --target cpu,sm_90
"$sgc" compile "$out/llamaw.onnx" -o "$out/llamaw.so" --optimizer adamw --lr 1e-2 --target cpu,sm_90
"$sgc" compile "$out/llamaw.onnx" -o "$out/llamaw_bf16.so" --optimizer adamw --lr 1e-2 --target cpu,sm_90 --precision bf16
cp "$out/llamaw_data.safetensors" "$out/llamaw_bf16_data.safetensors"
"$sgc" compile "$out/wide_rms.onnx" -o "$out/wide_rms.so" --optimizer adamw --lr 1e-3 --target cpu,sm_90
"$sgc" compile "$out/rms_2k.onnx" -o "$out/rms_2k.so" --optimizer adamw --lr 1e-3 --target cpu,sm_90
"$sgc" compile "$out/vocab.onnx" -o "$out/vocab_bf16.so" --optimizer adamw --lr 1e-3 --target cpu,sm_90 --precision bf16
cp "$out/vocab_data.safetensors" "$out/vocab_bf16_data.safetensors"
# Classifiers in row chunks (passes/ChunkClassifier, forced by a small chunk size): a head of 10,000
# classes without a bias (four chunks), and the small GPT and Llama (tied heads, bf16).
"$sgc" compile "$out/vocabh.onnx" -o "$out/vocabh_chunks.so" --optimizer adamw --lr 1e-3 --target cpu,sm_90 --classifier-chunk-mb 0.7
"$sgc" compile "$out/vocabh.onnx" -o "$out/vocabh_chunks_bf16.so" --optimizer adamw --lr 1e-3 --target cpu,sm_90 --precision bf16 --classifier-chunk-mb 0.35
"$sgc" compile "$out/gptw.onnx" -o "$out/gptw_chunks_bf16.so" --optimizer adamw --lr 1e-2 --target cpu,sm_90 --precision bf16 --classifier-chunk-mb 0.02
"$sgc" compile "$out/llamaw.onnx" -o "$out/llamaw_chunks_bf16.so" --optimizer adamw --lr 1e-2 --target cpu,sm_90 --precision bf16 --classifier-chunk-mb 0.02
cp "$out/vocabh_data.safetensors" "$out/vocabh_chunks_data.safetensors"
mv "$out/vocabh_data.safetensors" "$out/vocabh_chunks_bf16_data.safetensors"
cp "$out/gptw_data.safetensors" "$out/gptw_chunks_bf16_data.safetensors"
cp "$out/llamaw_data.safetensors" "$out/llamaw_chunks_bf16_data.safetensors"
# Fused attention's kernels (--attention fused) on the GPU, in f32 (a thread per row) and bf16
# (the tensor cores; the default for bf16 on a GPU).
"$sgc" compile "$out/gptw.onnx" -o "$out/gptw_fused.so" --optimizer adamw --lr 1e-2 --target cpu,sm_90 --attention fused
"$sgc" compile "$out/gptw.onnx" -o "$out/gptw_fused_bf16.so" --optimizer adamw --lr 1e-2 --target cpu,sm_90 --precision bf16 --attention fused
cp "$out/gptw_data.safetensors" "$out/gptw_fused_data.safetensors"
cp "$out/gptw_data.safetensors" "$out/gptw_fused_bf16_data.safetensors"
# Attention as Hopper's warpgroup products (heads of 64 and 128, bf16; grouped heads of 128 with
# the stored dS^T) against the CPU's kernels, and the same for sm_80 (mma.sync, seven products; the
# driver compiles its PTX on the H200) against them.
for m in gpth gpth128 llamah128; do
  "$sgc" compile "$out/$m.onnx" -o "$out/${m}_bf16.so" --optimizer adamw --lr 1e-3 --target cpu,sm_90 --precision bf16
  "$sgc" compile "$out/$m.onnx" -o "$out/${m}_mma_bf16.so" --optimizer adamw --lr 1e-3 --target sm_80 --precision bf16
  mv "$out/${m}_data.safetensors" "$out/${m}_bf16_data.safetensors"
  rm "$out/$m.onnx"
done
# SGD (the other bundles train with AdamW): f32, and bf16 with the tensor-core attention, as
# bench/gpu_attention.py trains.
"$sgc" compile "$out/gptw.onnx" -o "$out/gptw_sgd.so" --optimizer sgd --lr 0.1 --target cpu,sm_90
"$sgc" compile "$out/gptw.onnx" -o "$out/gptw_sgd_bf16.so" --optimizer sgd --lr 0.1 --target cpu,sm_90 --precision bf16
cp "$out/gptw_data.safetensors" "$out/gptw_sgd_data.safetensors"
cp "$out/gptw_data.safetensors" "$out/gptw_sgd_bf16_data.safetensors"
# The first step of fresh sessions with a large arena (first_step.py): causal attention at D 128,
# bf16, SGD, exported as bench/gpu_attention_build.sh exports it.
/usr/bin/python3 -c "import sys; sys.path.insert(0, '$src/bench'); import gpu_models as gm; gm.export_attention('attn128', '$out/attn128.onnx')"
"$sgc" compile "$out/attn128.onnx" -o "$out/attn128_sgd.so" --dim B=4 --optimizer sgd --lr 1e3 --precision bf16 --target sm_90
rm "$out/attn128.onnx"
cp "$src/bench/gpu_models.py" "$src/tests/gpu/first_step.py" "$out/"
# Data-parallel builds: their collectives (several buckets) through NCCL on the GPU; ZeRO-1 with
# clipping (its norm summed over the ranks' shards).
"$sgc" compile "$out/gptw.onnx" -o "$out/gptw_dp.so" --optimizer adamw --lr 1e-2 --target cpu,sm_90 --data-parallel allreduce --bucket-mb 0.05
"$sgc" compile "$out/gptw.onnx" -o "$out/gptw_dp_bf16.so" --optimizer adamw --lr 1e-2 --target cpu,sm_90 --precision bf16 --data-parallel allreduce --bucket-mb 0.05
"$sgc" compile "$out/gptw.onnx" -o "$out/gptw_z1.so" --optimizer adamw --lr 1e-2 --target cpu,sm_90 --data-parallel zero1 --ranks 1 --bucket-mb 0.05 --clip-grad-norm 1
"$sgc" compile "$out/gptw.onnx" -o "$out/gptw_clip.so" --optimizer adamw --lr 1e-2 --target sm_90 --clip-grad-norm 1
# For two GPUs: each rank on half of every batch.
"$sgc" compile "$out/gptw_half.onnx" -o "$out/gptw_half_dp.so" --optimizer adamw --lr 1e-2 --target sm_90 --data-parallel allreduce --bucket-mb 0.05
"$sgc" compile "$out/gptw_half.onnx" -o "$out/gptw_half_z1.so" --optimizer adamw --lr 1e-2 --target sm_90 --data-parallel zero1 --ranks 2 --bucket-mb 0.05 --clip-grad-norm 1
cp "$out/gptw_data.safetensors" "$out/gptw_dp_data.safetensors"
cp "$out/gptw_data.safetensors" "$out/gptw_z1_data.safetensors"
cp "$out/gptw_data.safetensors" "$out/gptw_dp_bf16_data.safetensors"
# Decoding over the paged key/value cache (tests/decode/decode_test.py): its libraries and
# PyTorch's reference tokens and logits.
/usr/bin/python3 "$src/tests/decode/decode_test.py" prepare "$sgc" "$out/decode"
rm -f "$out/decode/"*.onnx
xz -f "$out/decode/"*.so # check_gpu.sh unpacks them
cp "$src/tests/decode/decode_test.py" "$out/decode/"
cp "$src/tests/gpu/check_gpu.sh" "$src/tests/gpu/package_gpu.py" "$src/samples/train_ctypes.py" "$out/"
cp -r "$src/python/sgc" "$out/" # train_ctypes.py takes the ABI's structs from the package
xz -f "$out/"*.so # a device call carries 64 MiB: check_gpu.sh unpacks them
rm -f "$out/"*.onnx
# A device call carries 64 MiB with the working tree, so the bundle goes in two parts of about
# 25 MB: part1 holds the f32 builds, the first step and the decoders; part2 the bf16 ones (and
# gptw, whose losses the host-stream and package checks compare against). Each part has all the
# data and scripts; check_gpu.sh checks what its part carries and names what it skips.
rm -rf "$out/part1" "$out/part2" # a bundle built before
part() {
  dir="$out/$1"; shift
  mkdir -p "$dir"
  for f in "$out"/*; do
    case $f in *.so.xz|*/decode|*/part1|*/part2) ;; *) cp -r "$f" "$dir/" ;; esac
  done
  for m in "$@"; do cp "$out/$m.so.xz" "$dir/"; done
}
part part1 sample mlp cnn gpt gptw wide vocab llamaw wide_rms rms_2k gptw_fused gptw_sgd gptw_dp gptw_z1 \
  gptw_clip gptw_half_dp gptw_half_z1 attn128_sgd
mv "$out/decode" "$out/part1/"
part part2 gptw mlp_bf16 cnn_bf16 gpt_bf16 gptw_bf16 gptw_fused_bf16 gptw_sgd_bf16 gptw_dp_bf16 vocab_bf16 \
  llamaw_bf16 gpth_bf16 gpth128_bf16 vocabh_chunks vocabh_chunks_bf16 gptw_chunks_bf16 llamaw_chunks_bf16 \
  gpth_mma_bf16 gpth128_mma_bf16 llamah128_bf16 llamah128_mma_bf16
find "$out" -maxdepth 1 ! -name part1 ! -name part2 ! -path "$out" -exec rm -rf {} +
