#!/bin/sh
# SIGKILL during `sgc train --save`: wherever the kill lands (before, during
# or after the checkpoint is written), the checkpoint at the path is whole, the
# previous one or the new one, and loads. The kill times are a fixed sequence
# over the run's length, so the test is repeatable.
# Usage: kill_save.sh SGC SOURCE_DIR
set -u
sgc=$1 src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
data=$src/samples/mlp_train_data.safetensors
"$sgc" compile "$src/samples/mlp_train.onnx" -o train.so --optimizer adamw --target cpu || exit 1
"$sgc" train train.so --data "$data" --steps 1 --save ck.safetensors >/dev/null || exit 1
start=$(date +%s%N)
"$sgc" train train.so --data "$data" --steps 40 --load ck.safetensors --save whole.safetensors >/dev/null || exit 1
run=$(( ($(date +%s%N) - start) / 1000 )) # microseconds a run takes
kept=0 replaced=0
for i in 0 1 2 3 4 5 6 7 8 9 10 11; do
  before=$(cksum < ck.safetensors)
  "$sgc" train train.so --data "$data" --steps 40 --load ck.safetensors --save ck.safetensors >/dev/null 2>&1 &
  pid=$!
  sleep "$(awk -v r="$run" -v i="$i" 'BEGIN { printf "%.6f", r * (0.5 + i / 11 * 0.7) / 1e6 }')"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if ! "$sgc" train train.so --data "$data" --steps 0 --load ck.safetensors >/dev/null 2>err.txt; then
    echo "FAIL: after a kill at $i the checkpoint does not load: $(cat err.txt)"
    exit 1
  fi
  [ "$(cksum < ck.safetensors)" = "$before" ] && kept=$((kept + 1)) || replaced=$((replaced + 1))
  rm -f ck.safetensors.tmp.*
done
echo "kill during --save: 12 kills (a run takes ${run} us): the previous checkpoint kept $kept times, the new one whole $replaced times; every one loads"
