#!/bin/sh
# Progress on a terminal (a pseudo-terminal from Python's pty module), and what scripts see:
# - sgc compile (codegen/Progress.h): each stage's line with its time, code generation with its
#   GPU kernel count; none with --quiet, and none when stderr is a pipe or a file;
# - sgc train (driver/StepReport.h): one progress line (step / total, loss, ms, samples/s or
#   tokens/s, time left) instead of the JSON lines, which a pipe gets with "ms" and
#   "samples_per_s" (and "tokens_per_s" for a model of token ids); --metrics FILE appends the
#   same figures and the peak memory in Prometheus's text format.
# Usage: progress_lines.sh SGC SOURCE_DIR
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
for stage in "import $model" "training step" "kernels and memory plan" "LLVM for x86-64 and sm_90 (ptxas): " "link $tmp/a.so"; do
  grep -aF "sgc: $stage" "$tmp/tty.txt" | grep -aqE "[0-9]+\.[0-9][0-9] s" || fail "no timed line for '$stage' on a terminal: $(cat -v "$tmp/tty.txt" | head -c 600)"
done
grep -aqE "sm_90 \(ptxas\): [0-9]+ GPU kernels in [0-9]+ modules? " "$tmp/tty.txt" || fail "the code generation stage does not count its GPU kernels"
on_terminal "$tmp/quiet.txt" compile "$model" -o "$tmp/b.so" --target cpu --quiet || fail "compile --quiet failed"
[ ! -s "$tmp/quiet.txt" ] || fail "--quiet still wrote: $(cat -v "$tmp/quiet.txt" | head -c 300)"
"$sgc" compile "$model" -o "$tmp/c.so" --target cpu 2> "$tmp/pipe.txt" | cat || fail "compile into a pipe failed"
[ ! -s "$tmp/pipe.txt" ] || fail "stderr to a file got progress lines: $(head -c 300 "$tmp/pipe.txt")"
cmp -s "$tmp/b.so" "$tmp/c.so" || fail "the library differs with and without progress lines"
data=$src/samples/mlp_train_data.safetensors
on_terminal "$tmp/train.txt" train "$tmp/c.so" --data "$data" --steps 3 || fail "train on a terminal failed: $(tail -c 300 "$tmp/train.txt")"
tr '\r' '\n' < "$tmp/train.txt" | grep -aqE "^sgc: step 3/3  loss [0-9.e+-]+  [0-9.]+ ms  [0-9,.]+ samples/s  [0-9]+ s left" ||
  fail "no progress line for train on a terminal: $(cat -v "$tmp/train.txt" | head -c 400)"
! grep -aq '"step"' "$tmp/train.txt" || fail "JSON lines on a terminal"
"$sgc" train "$tmp/c.so" --data "$data" --steps 3 > "$tmp/train.json" || fail "train into a file failed"
/usr/bin/python3 - "$tmp/train.json" <<'PY' || fail "JSON lines of train: $(cat "$tmp/train.json")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l["step"] for l in lines] == [0, 1, 2], lines
for l in lines:
    assert l["ms"] > 0 and abs(l["samples_per_s"] - 32 * 1000 / l["ms"]) <= 1e-3 * l["samples_per_s"], l  # the sample's batch: 32
    assert "tokens_per_s" not in l, l
PY
# A model of token ids [2, 4] (an embedding and a mean): tokens/s, 8 tokens a step.
/usr/bin/python3 - "$tmp" "$src" <<'PY' || fail "the token model"
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
sys.path.insert(0, sys.argv[2] + "/tests/pyutil")
import st
emb = numpy_helper.from_array(np.random.default_rng(0).standard_normal((10, 3)).astype(np.float32), "emb")
g = helper.make_graph([helper.make_node("Gather", ["emb", "ids"], ["e"]), helper.make_node("ReduceMean", ["e"], ["loss"], keepdims=0)], "tokens",
                      [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 4])], [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], [emb])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1] + "/tokens.onnx")
st.write(sys.argv[1] + "/tokens.safetensors", {"ids": np.arange(16, dtype=np.int64).reshape(2, 2, 4) % 10})
PY
"$sgc" train "$tmp/tokens.onnx" --data "$tmp/tokens.safetensors" --steps 2 > "$tmp/tokens.json" || fail "train the token model"
/usr/bin/python3 -c "
import json, sys
for l in map(json.loads, open(sys.argv[1])):
    assert abs(l['tokens_per_s'] - 8 * 1000 / l['ms']) <= 1e-3 * l['tokens_per_s'] and abs(l['samples_per_s'] * 4 - l['tokens_per_s']) <= 1e-3 * l['tokens_per_s'], l
" "$tmp/tokens.json" || fail "tokens per second: $(cat "$tmp/tokens.json")"
on_terminal "$tmp/tokens.txt" train "$tmp/tokens.onnx" --data "$tmp/tokens.safetensors" --steps 2 || fail "the token model on a terminal"
grep -aq "tokens/s" "$tmp/tokens.txt" || fail "no tokens/s on a terminal: $(cat -v "$tmp/tokens.txt")"
# --metrics: each step's figures appended in Prometheus's text format, the HELP and TYPE lines once.
"$sgc" train "$tmp/c.so" --data "$data" --steps 2 --metrics "$tmp/m.prom" > "$tmp/m1.json" &&
  "$sgc" train "$tmp/tokens.onnx" --data "$tmp/tokens.safetensors" --steps 1 --metrics "$tmp/m.prom" > "$tmp/m2.json" || fail "train --metrics"
/usr/bin/python3 - "$tmp/m.prom" "$tmp/m1.json" "$tmp/m2.json" <<'PY' || fail "the metrics file: $(cat "$tmp/m.prom")"
import json, re, sys
lines = open(sys.argv[1]).read().splitlines()
types = [l for l in lines if l.startswith("# TYPE")]
assert len(types) == 5 and len(set(types)) == 5, types  # once, though two runs appended
samples = {}
for l in lines:
    if l.startswith("#"):
        continue
    m = re.fullmatch(r'(sgc_train_[a-z_]+)\{model="([^"]*)",step="(\d+)"\} (\S+)', l)
    assert m, l
    samples[(m[1], m[2].rsplit("/", 1)[-1], int(m[3]))] = float(m[4])
for path, model in ((sys.argv[2], "c.so"), (sys.argv[3], "tokens.onnx")):
    for j in map(json.loads, open(path)):
        assert samples[("sgc_train_loss", model, j["step"])] == j["loss"], (model, j)
        assert samples[("sgc_train_peak_memory_bytes", model, j["step"])] > 0
assert ("sgc_train_tokens_per_second", "tokens.onnx", 0) in samples and ("sgc_train_tokens_per_second", "c.so", 0) not in samples
PY
"$sgc" train "$tmp/c.so" --data "$data" --steps 1 --metrics "$tmp/no/such/dir/m.prom" > /dev/null 2> "$tmp/m.err" && fail "an unwritable metrics file was accepted"
grep -q "^sgc: error: --metrics .*no/such/dir/m.prom: the folder .* does not exist" "$tmp/m.err" || fail "unclear metrics error: $(cat "$tmp/m.err")"
[ "$failures" = 0 ] && echo "progress lines: on a terminal only, each compile stage timed; train's rates on a terminal, in its JSON lines and in --metrics"
exit "$failures"
