#!/bin/sh
# Trains each model of a bundle (make_bundle.sh) for 12 steps on the CPU and
# on the GPU through the C ABI (train_ctypes.py) and requires the losses to
# agree within 1e-4 relative (fp32 models) or 2e-2 (bf16 models); the
# data-parallel builds (_dp) run their all-reduces through NCCL as one rank on
# the GPU; the decoding test's checks run on the GPU (decode/). Prints SKIP
# where there is no GPU.
# A bundle too large for one device call travels in parts (make_bundle.sh
# splits it); each part's run checks what it carries and names what it skips.
# Usage: check_gpu.sh [BUNDLE_DIR]
cd "${1:-$(dirname "$0")}" || exit 1
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: no GPU on this machine"
  exit 0
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# make_bundle.sh packs the libraries (a device call carries 64 MiB).
python3 -c "
import glob, lzma, os
for f in glob.glob('*.so.xz') + glob.glob('decode/*.so.xz'):
    with lzma.open(f) as src, open(f[:-3], 'wb') as dst:
        dst.write(src.read())
"
# NCCL for the data-parallel builds: the CUDA toolkit's, else the one PyTorch's wheels carry.
if [ -z "${SGC_NCCL:-}" ] && [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ]; then
  SGC_NCCL=$(python3 -c "import glob, site; print(next(iter(sorted(f for p in site.getsitepackages() for f in glob.glob(p + '/nvidia/nccl*/lib/libnccl.so.2'))), ''))" 2>/dev/null)
  export SGC_NCCL
fi
status=0
skipped=0
# has LIBRARY...: all carried in this part; else says which check is skipped.
has() {
  for f in "$@"; do
    [ -e "$f" ] || { echo "SKIP: $f is not in this part of the bundle"; skipped=$((skipped + 1)); return 1; }
  done
}
# same_losses LABEL LIMIT WHAT RUN.out REFERENCE.out: both runs of train_ctypes.py printed 12
# losses and RUN's are within LIMIT of REFERENCE's (relative); prints the largest difference, or the
# tail of each run's .err where one fell short.
same_losses() {
  python3 - "$@" <<'PY'
import json, os, sys
label, limit, what, run, ref = sys.argv[1:6]
losses = [[json.loads(l)["loss"] for l in open(f)] if os.path.exists(f) else [] for f in (run, ref)]
if any(len(l) != 12 for l in losses):
    tails = [open(f[:-4] + ".err").read()[-300:] for f in (run, ref) if os.path.exists(f[:-4] + ".err")]
    print(label, "FAILED:", *tails)
    sys.exit(1)
worst = max(abs(a - b) / abs(b) for a, b in zip(*losses))
print(f"{label}: 12 steps, max relative loss difference {what} {worst:.2e}")
sys.exit(0 if worst <= float(limit) else 1)
PY
}
for m in sample mlp cnn gpt gptw wide vocab llamaw wide_rms rms_2k gptw_fused gptw_sgd gptw_dp gptw_z1 mlp_bf16 cnn_bf16 gpt_bf16 gptw_bf16 gptw_fused_bf16 gptw_sgd_bf16 gptw_dp_bf16 vocab_bf16 llamaw_bf16 gpth_bf16 gpth128_bf16 llamah128_bf16 vocabh_chunks vocabh_chunks_bf16 gptw_chunks_bf16 llamaw_chunks_bf16; do
  has $m.so || continue
  comm=; case $m in *_dp*|*_z1*) comm=nccl ;; esac # data-parallel builds: NCCL (one rank) on the GPU
  python3 -u train_ctypes.py $m.so ${m}_data.safetensors 12 cpu > $m.cpu.out 2> $m.cpu.err
  python3 -u train_ctypes.py $m.so ${m}_data.safetensors 12 cuda:0 $comm > $m.gpu.out 2> $m.gpu.err
  limit=1e-4; case $m in *bf16) limit=2e-2 ;; esac
  same_losses $m $limit "GPU vs CPU" $m.gpu.out $m.cpu.out || status=1
done
# Attention as Hopper's warpgroup products against the mma.sync kernels of an sm_80 build, both on
# this GPU: the same arithmetic in another order, far closer than either is to the CPU's.
for m in gpth gpth128 llamah128; do
  has ${m}_mma_bf16.so ${m}_bf16.gpu.out || continue
  python3 -u train_ctypes.py ${m}_mma_bf16.so ${m}_bf16_data.safetensors 12 cuda:0 > ${m}_mma.gpu.out 2> ${m}_mma.gpu.err
  same_losses $m 1e-3 "of the warpgroup products from sm_80's mma.sync" ${m}_bf16.gpu.out ${m}_mma.gpu.out || status=1
done
# The step as a CUDA graph (replayed from the second step on) and without one (launch by launch)
# trains alike: the same kernels on the same data (each GEMM takes cuBLASLt's first algorithm, not
# the fastest timed, which may differ between sessions), apart from the order of the atomic adds in
# reductions: within 1e-4.
for m in gptw llamaw; do
  has $m.so || continue
  SGC_GEMM_TUNING=0 python3 -u train_ctypes.py $m.so ${m}_data.safetensors 12 cuda:0 > $m.graph.out 2> $m.graph.err
  SGC_GEMM_TUNING=0 SGC_CUDA_GRAPHS=0 python3 -u train_ctypes.py $m.so ${m}_data.safetensors 12 cuda:0 > $m.nograph.out 2> $m.nograph.err
  same_losses $m 1e-4 "as a CUDA graph against launch by launch" $m.graph.out $m.nograph.out || status=1
done
# The host's own stream (sgc_session_options.cuda_stream): the same training as on the session's.
if has gptw.so gptw.gpu.out; then
SGC_SAMPLE_HOST_STREAM=1 python3 -u train_ctypes.py gptw.so gptw_data.safetensors 12 cuda:0 > gptw.stream.out 2> gptw.stream.err
same_losses "gptw on the host's stream" 1e-4 "against the session's stream" gptw.stream.out gptw.gpu.out || status=1
# The Python package as a PyTorch host uses it: torch's stream, CUDA inputs, DLPack views, a trace.
python3 -u package_gpu.py gptw.so gptw_data.safetensors gptw.gpu.out $([ -e gptw_bf16.so ] && echo gptw_bf16.so) || status=1
fi
# The first step of fresh sessions against PyTorch's gradient, each in a process of its own.
! has attn128_sgd.so || python3 -u first_step.py attn128_sgd.so 6 || status=1
# Decoding over the paged cache on the GPU: PyTorch's greedy tokens and logits, the fork, the
# page accounting, and the warp-per-head attention against the CPU's.
if has decode/decode_test.py; then
  (cd decode && python3 -u decode_test.py check . cuda:0) || { echo "decode on the GPU FAILED"; status=1; }
fi
# A peer that never comes: rank 0 of 2 alone must fail within its 5 s time-out, not hang.
if has gptw_dp.so; then
start=$(date +%s)
timeout 120 python3 -u train_ctypes.py gptw_dp.so gptw_data.safetensors 1 cuda:0 nccl:0:2:nccl.lonely.id:5000 > lonely.out 2> lonely.err
took=$(( $(date +%s) - start ))
if grep -q "within 5000 ms" lonely.err && [ "$took" -lt 60 ]; then
  echo "NCCL rank 0 of 2 without its peer: failed after ${took} s: $(tail -1 lonely.err)"
else
  echo "NCCL rank 0 of 2 without its peer FAILED (after ${took} s): $(tail -3 lonely.err)"
  status=1
fi
fi
# Two GPUs: two NCCL ranks, each on half of every batch, against one GPU on whole batches.
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && has gptw_clip.so gptw_half_dp.so gptw_half_z1.so; then
  export NCCL_NVLS_ENABLE=0 # NVLink multicast stays off
  python3 -u train_ctypes.py gptw_clip.so gptw_data.safetensors 12 cuda:0 > gptw_clip.gpu.out 2> gptw_clip.gpu.err
  for m in dp z1; do
    rm -f nccl.$m.id
    for r in 0 1; do
      timeout 300 python3 -u train_ctypes.py gptw_half_$m.so gptw_data.safetensors 12 cuda:$r nccl:$r:2:nccl.$m.id:60000 \
        > $m.2gpu.$r.out 2> $m.2gpu.$r.err &
    done
    start=$(date +%s)
    wait
    echo "gptw_half_$m: two ranks ran and exited in $(( $(date +%s) - start )) s"
    python3 - $m <<'PY' || status=1
import json, sys
m = sys.argv[1]
one = [json.loads(l)["loss"] for l in open("gptw.gpu.out" if m == "dp" else "gptw_clip.gpu.out")]
two = [json.loads(l)["loss"] for l in open(m + ".2gpu.0.out")]
if len(two) != 12:
    print(f"gptw_half_{m} on 2 GPUs FAILED:", open(m + ".2gpu.0.err").read()[-300:], open(m + ".2gpu.1.err").read()[-300:])
    sys.exit(1)
worst = max(abs(a - b) / abs(b) for a, b in zip(two, one))
print(f"gptw_half_{m} on 2 GPUs (NCCL, half batches): 12 steps, max relative loss difference against 1 GPU {worst:.2e}")
sys.exit(0 if worst <= 1e-4 else 1)
PY
  done
else
  echo "SKIP: two NCCL ranks need two GPUs"
fi
[ $skipped = 0 ] || echo "gpu check: $skipped checks skipped (not in this part)"
[ $status = 0 ] && echo "gpu check: passed" || echo "gpu check: FAILED"
exit $status
