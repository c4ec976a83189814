#!/bin/bash
# The device side of a GPU benchmark session in one call, within a time limit: the benchmark
# (gpu_train.py: sgc, PyTorch eager and torch.compile in the same run), the card's own ceiling
# for the optimizer's traffic (gpu_bandwidth.cu), an A/B of sgc builds (gpu_ab.py) and
# check_gpu.sh over a bundle (tests/gpu/make_bundle.sh) or the real-model suite
# (check_gpu_models.py over scripts/gpu.sh models' folder), each run only if its usual time
# still fits, in that order. Everything it writes goes under $OUT (default ./gpu_session): the
# benchmark's log and JSON, the A/B's JSON, and the rest in one results.tar.xz (a device call
# brings back at most 8 files).
# Usage (on the device, from the project root):
#   bench/gpu_session.sh [--limit SECONDS] [--libs DIR] [--models gpt,llama,mlp] [--ab DIR]
#                        [--ab-models LIST] [--ab-runs N] [--check DIR] [--bandwidth no]
#   --libs: gpt.so.xz, llama.so.xz, mlp.so.xz as bench/gpu_build.sh and gpu_llama_build.sh
#   write them (default bench/out); --models none: no benchmark; --ab: NAME_VARIANT.so.xz for
#   gpu_ab.py; --check: a bundle part (check_gpu.sh) or build/gpu-models (check_gpu_models.py);
#   --bandwidth no: leave out gpu_bandwidth.cu (a card whose ceiling is measured).
set -u
cd "$(dirname "$0")/.."
limit=540 libs=bench/out models=gpt,llama,mlp ab= ab_models=mlp,gpt,llama ab_runs=2 check= bandwidth=yes
while [ $# -gt 0 ]; do
  case "$1" in -h | --help) sed -n '2,16p' "$0" | cut -c3-; exit 0 ;; esac
  [ $# -ge 2 ] || { echo "gpu_session.sh: $1 needs a value (see --help)" >&2; exit 2; }
  case "$1" in
    --limit) limit=$2 ;;
    --libs) libs=$2 ;;
    --models) models=$2 ;;
    --ab) ab=$2 ;;
    --ab-models) ab_models=$2 ;;
    --ab-runs) ab_runs=$2 ;;
    --check) check=$2 ;;
    --bandwidth) bandwidth=$2 ;;
    *) echo "gpu_session.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift 2
done
[ -d "$libs" ] || { echo "gpu_session.sh: --libs $libs: no such folder" >&2; exit 2; }
[ -z "$ab" ] || [ -d "$ab" ] || { echo "gpu_session.sh: --ab $ab: no such folder" >&2; exit 2; }
[ -z "$check" ] || [ -f "$check/check_gpu.sh" ] || [ -f "$check/check_gpu_models.py" ] ||
  { echo "gpu_session.sh: --check $check: no check_gpu.sh (tests/gpu/make_bundle.sh) or check_gpu_models.py (scripts/gpu.sh models) there" >&2; exit 2; }
case "$bandwidth" in yes | no) ;; *) echo "gpu_session.sh: --bandwidth takes yes or no" >&2; exit 2 ;; esac
case "$limit$ab_runs" in *[!0-9]*) echo "gpu_session.sh: --limit and --ab-runs take whole numbers" >&2; exit 2 ;; esac
out=${OUT:-gpu_session}
mkdir -p "$out"
export OUT="$out" PYTHONUNBUFFERED=1 # gpu_train.py and gpu_ab.py write their profiles and JSON there
# Whether a step of about $1 seconds still ends 15 s before the limit.
fits() { [ $((SECONDS + $1)) -lt $((limit - 15)) ]; }
# About 70 s a model for the benchmark (torch.compile's first steps included; up to 100 s on a
# fresh machine), 20 s a library and run for the A/B plus 20 s a library for its profile, 60 s
# for a bundle part's checks.
count() { echo "$1" | tr ',' '\n' | grep -c .; }
ab_libs=0
[ -z "$ab" ] || for m in $(echo "$ab_models" | tr ',' ' '); do ab_libs=$((ab_libs + $(ls "$ab" | grep -c "^${m}_.*\.so"))); done
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader || exit 1
if [ "$models" = none ]; then
  echo "skipped: the benchmark (--models none)"
elif fits $((70 * $(count "$models"))); then
  python3 bench/gpu_train.py "$libs" "$models" 2>&1 | tee "$out/gpu_train.log"
else
  echo "skipped: the benchmark (${SECONDS}s of ${limit}s gone)"
fi
echo "after the benchmark: ${SECONDS}s"
if [ "$bandwidth" = yes ] && fits 40 && command -v nvcc >/dev/null; then
  nvcc -O3 -arch=sm_90 -o "$out/gpu_bandwidth" bench/gpu_bandwidth.cu && "$out/gpu_bandwidth" > "$out/gpu_bandwidth.txt" 2>&1
  grep -E "copy|V= [48] threads=256 one" "$out/gpu_bandwidth.txt"
  rm -f "$out/gpu_bandwidth"
fi
if [ -n "$ab" ]; then
  runs=$ab_runs
  while [ "$runs" -gt 1 ] && ! fits $((20 * (runs + 1) * ab_libs)); do runs=$((runs - 1)); done
  if fits $((20 * (runs + 1) * ab_libs)); then
    # Cut 15 s before the limit, so that what it finished is packed and comes back.
    timeout $((limit - 15 - SECONDS)) python3 bench/gpu_ab.py "$ab" "$ab_models" "$runs" 2>&1 | tee "$out/ab.log" | grep -v "^ "
  else
    echo "skipped: the A/B (${SECONDS}s of ${limit}s gone)"
  fi
  echo "after the A/B: ${SECONDS}s"
fi
if [ -n "$check" ]; then
  if fits 60; then # cut 15 s before the limit, as the A/B
    if [ -f "$check/check_gpu.sh" ]; then
      (cd "$check" && timeout $((limit - 15 - SECONDS)) sh check_gpu.sh .) > "$out/check_gpu.log" 2>&1
    else
      timeout $((limit - 15 - SECONDS)) python3 "$check/check_gpu_models.py" "$check" > "$out/check_gpu.log" 2>&1
    fi
    echo "check: exit $? at ${SECONDS}s"
    grep -v SKIP "$out/check_gpu.log" | tail -5
  else
    echo "skipped: the check (${SECONDS}s of ${limit}s gone)"
  fi
fi
rm -f "$out"/*.safetensors
(cd "$out" && tar cJf results.tar.xz --exclude=results.tar.xz --exclude=gpu_train.log --exclude=gpu_train.json --exclude=ab.json * 2>/dev/null &&
  find . -maxdepth 1 -type f ! -name results.tar.xz ! -name gpu_train.log ! -name gpu_train.json ! -name ab.json -delete)
echo "done in ${SECONDS}s"
ls -l "$out"
