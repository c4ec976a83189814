#!/bin/sh
# Runs the importer fuzzer on a seed corpus made of ONNX's node-test models
# and of the inputs that once crashed it (tests/fuzz/regressions). The run is
# deterministic (fixed seed and number of runs) so that CI is repeatable;
# SGC_FUZZ_SEED and SGC_FUZZ_RUNS change them for longer explorations.
# Usage: run_fuzz.sh FUZZER NODE_TEST_DIR WORK_DIR
set -eu
fuzzer=$1 nodes=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work/corpus" "$work/seeds"
for d in "$nodes"/*/; do
  [ -f "$d/model.onnx" ] && cp "$d/model.onnx" "$work/seeds/$(basename "$d").onnx"
done
cp "$here"/regressions/* "$work/seeds/"
cd "$work"
export UBSAN_OPTIONS=print_stacktrace=1
# -rss_limit_mb and -timeout turn blow-ups into failures; -max_total_time bounds the time.
exec "$fuzzer" -seed="${SGC_FUZZ_SEED:-1}" -runs="${SGC_FUZZ_RUNS:-1500000}" -max_total_time=240 \
  -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 -artifact_prefix="$work/" corpus seeds
