#!/bin/sh
# The sgc command on a truncated model: exit status 1 and one line on stderr
# that names the file. Usage: cli_bad_input.sh SGC SAMPLE_MODEL
set -u
sgc=$1 sample=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
head -c 100 "$sample" > "$tmp/cut.onnx"
"$sgc" inspect "$tmp/cut.onnx" >"$tmp/out" 2>"$tmp/err"; status=$?
[ "$status" = 1 ] || { echo "expected exit status 1, got $status"; exit 1; }
[ "$(wc -l < "$tmp/err")" = 1 ] || { echo "expected one line on stderr:"; cat "$tmp/err"; exit 1; }
grep -q "cut.onnx: not a valid ONNX model" "$tmp/err" || { echo "unexpected message:"; cat "$tmp/err"; exit 1; }
"$sgc" inspect "$tmp/none.onnx" 2>"$tmp/err"; [ $? = 1 ] && grep -q "no such file" "$tmp/err" || { echo "missing file not reported"; exit 1; }
"$sgc" compile --bogus 2>"$tmp/err"; [ $? = 2 ] && grep -q "unknown option '--bogus'" "$tmp/err" || { echo "unknown option not reported"; exit 1; }
"$sgc" run --help | grep -q "usage: sgc run" || { echo "no help"; exit 1; }
echo "cli bad input: ok"
