#!/bin/sh
# Runs the safetensors fuzzer on a seed corpus of the project's own files (the
# samples' data, a checkpoint) and of the inputs that once broke the reader,
# deterministically (fixed seed and number of runs), bounded in time for CI.
# Usage: run_fuzz_safetensors.sh FUZZER SOURCE_DIR WORK_DIR
set -eu
fuzzer=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work/corpus" "$work/seeds"
cp "$src"/samples/*.safetensors "$work/seeds/"
cp "$src"/tests/fuzz/regressions/*.safetensors "$work/seeds/" 2>/dev/null || true
cd "$work"
export UBSAN_OPTIONS=print_stacktrace=1
exec "$fuzzer" -seed="${SGC_FUZZ_SEED:-1}" -runs="${SGC_FUZZ_RUNS:-400000}" -max_total_time=90 \
  -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$work/" corpus seeds
