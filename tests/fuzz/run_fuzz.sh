#!/bin/sh
# Runs the importer fuzzer for a bounded time on a seed corpus made of ONNX's
# node-test models. Usage: run_fuzz.sh FUZZER NODE_TEST_DIR WORK_DIR SECONDS
set -eu
fuzzer=$1 nodes=$2 work=$3 seconds=$4
mkdir -p "$work/corpus" "$work/seeds"
for d in "$nodes"/*/; do
  [ -f "$d/model.onnx" ] && cp "$d/model.onnx" "$work/seeds/$(basename "$d").onnx"
done
cd "$work"
# -max_total_time bounds the run; -rss_limit_mb and -timeout turn blow-ups into failures.
exec "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 \
  -artifact_prefix="$work/" corpus seeds
