#!/bin/sh
# Runs the TorchScript reader's fuzzer on a seed corpus of small archives
# traced by torch 1.13 (tests/fuzz/torchscript-seeds), their pickles and code
# on their own ('P' and 'C' prefixed, see FuzzTorchScript.cpp), and the inputs
# that once crashed it. Deterministic, like run_fuzz.sh.
# Usage: run_fuzz_torchscript.sh FUZZER WORK_DIR
set -eu
fuzzer=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work/corpus" "$work/seeds"
cp "$here"/torchscript-seeds/* "$work/seeds/"
cd "$work"
export UBSAN_OPTIONS=print_stacktrace=1
exec "$fuzzer" -seed="${SGC_FUZZ_SEED:-1}" -runs="${SGC_FUZZ_RUNS:-400000}" -max_total_time=150 \
  -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 -artifact_prefix="$work/" corpus seeds
