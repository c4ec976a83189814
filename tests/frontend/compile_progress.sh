#!/bin/sh
# sgc compile's progress lines (codegen/Progress.h): on a terminal (a pseudo-terminal from
# Python's pty module) each stage's line with its time, the GPU stage with its kernel count; none
# with --quiet, and none when stderr is a pipe or a file (scripts and CI see errors only).
# Usage: compile_progress.sh SGC SOURCE_DIR
set -u
sgc=$1 src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
model=$src/samples/mlp_train.onnx
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
# on_terminal FILE ARGS...: runs sgc with stdin, stdout and stderr on a pseudo-terminal; its output in FILE
# (pty.spawn also echoes it to its own stdout, dropped).
on_terminal() {
  out=$1; shift
  /usr/bin/python3 - "$out" "$sgc" "$@" >/dev/null <<'PY'
import os, pty, sys
out, argv = sys.argv[1], sys.argv[2:]
data = []
def read(fd):
    b = os.read(fd, 4096)
    data.append(b)
    return b
status = pty.spawn(argv, read)
open(out, "wb").write(b"".join(data))
sys.exit(os.waitstatus_to_exitcode(status))
PY
}
on_terminal "$tmp/tty.txt" compile "$model" -o "$tmp/a.so" --target cpu,sm_90 || fail "compile on a terminal failed: $(tail -c 300 "$tmp/tty.txt")"
for stage in "import $model" "training step" "kernels and memory plan" "LLVM and ptxas for sm_90: " "LLVM for x86-64" "link $tmp/a.so"; do
  grep -aF "sgc: $stage" "$tmp/tty.txt" | grep -aqE "[0-9]+\.[0-9][0-9] s" || fail "no timed line for '$stage' on a terminal: $(cat -v "$tmp/tty.txt" | head -c 600)"
done
grep -aqE "sm_90: [0-9]+ kernels in 1 module" "$tmp/tty.txt" || fail "the GPU stage does not count its kernels"
on_terminal "$tmp/quiet.txt" compile "$model" -o "$tmp/b.so" --target cpu --quiet || fail "compile --quiet failed"
[ ! -s "$tmp/quiet.txt" ] || fail "--quiet still wrote: $(cat -v "$tmp/quiet.txt" | head -c 300)"
"$sgc" compile "$model" -o "$tmp/c.so" --target cpu 2> "$tmp/pipe.txt" | cat || fail "compile into a pipe failed"
[ ! -s "$tmp/pipe.txt" ] || fail "stderr to a file got progress lines: $(head -c 300 "$tmp/pipe.txt")"
cmp -s "$tmp/b.so" "$tmp/c.so" || fail "the library differs with and without progress lines"
[ "$failures" = 0 ] && echo "progress lines: on a terminal only, each stage timed"
exit "$failures"
