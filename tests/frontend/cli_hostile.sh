#!/bin/sh
# Hostile and careless input to sgc and the libraries it compiles (issue 19):
# each case must end in a clear one-line error (exit status 1, 2 for usage),
# never a signal, a hang, a silent acceptance or lost work.
# Usage: cli_hostile.sh SGC SOURCE_DIR
set -u
sgc=$1 src=$2
py=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
failures=0
# expect STATUS TEXT -- COMMAND...: the command exits with STATUS within 60 s and its stderr holds TEXT.
expect() {
  want=$1 text=$2
  shift 3
  timeout 60 "$@" >out.txt 2>err.txt
  got=$?
  if [ "$got" != "$want" ] || ! grep -qF -- "$text" err.txt; then
    echo "FAIL: $* -> status $got (expected $want), stderr: $(head -c 300 err.txt)"
    failures=$((failures + 1))
  else
    echo "ok: $(head -c 160 err.txt | tr '\n' ' ')"
  fi
}
data=$src/samples/mlp_train_data.safetensors
"$sgc" compile "$src/samples/mlp_train.onnx" -o train.so --optimizer adamw --lr 1e-2 --target cpu || exit 1
"$sgc" train train.so --data "$data" --steps 2 --save ck.safetensors >/dev/null || exit 1

# Threads: bounded, and refused beyond the bound.
expect 1 "num_threads must be from 0" -- "$sgc" train train.so --data "$data" --steps 1 --threads 100000
# Threads the system will not create (address space for 60 stacks denied): a clean error, no hang.
(ulimit -v 400000; timeout 60 "$sgc" train train.so --data "$data" --steps 1 --threads 60 >/dev/null 2>threads.txt); got=$?
if [ "$got" = 0 ] || { [ "$got" = 1 ] && grep -q "cannot start the session's worker threads" threads.txt; }; then
  echo "ok: threads under a memory limit: status $got $(head -c 120 threads.txt)"
else
  echo "FAIL: threads under a memory limit: status $got $(head -c 300 threads.txt)"; failures=$((failures + 1))
fi
# Data files: a folder, devices, a pipe, no batches.
expect 1 "is a directory" -- "$sgc" train train.so --data "$tmp" --steps 1
expect 1 "not a regular file" -- "$sgc" train train.so --data /dev/zero --steps 1
mkfifo pipe
expect 1 "not a regular file" -- "$sgc" train train.so --data pipe --steps 1
$py - "$src" <<'PY'
import sys; sys.path.insert(0, sys.argv[1] + "/tests/pyutil")
import numpy as np, st, json, struct
d = st.read(sys.argv[1] + "/samples/mlp_train_data.safetensors")
st.write("empty.safetensors", {k: v[:0] for k, v in d.items()})
bad = dict(d); bad["labels"] = d["labels"].copy(); bad["labels"][1, 3] = 1000
st.write("labels.safetensors", bad)
nan = dict(d); nan["x"] = d["x"].copy(); nan["x"][0, 0, 0] = np.nan
st.write("nan.safetensors", nan)
ck = st.read("ck.safetensors")
for name, step in (("negative", -3), ("huge", 2**63 - 1)):
    c = dict(ck); c["sgc.step"] = np.array(step, np.int64); st.write(name + ".safetensors", c)
def raw(path, header, body):  # a file as written by hand: header JSON as given
    h = header.encode(); h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + body)
raw("twice.safetensors", '{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', bytes(8))
raw("overlap.safetensors", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', bytes(12))
PY
expect 1 "holds no batches" -- "$sgc" train train.so --data empty.safetensors --steps 1
expect 1 "the header names tensor 'x' twice" -- "$sgc" inspect twice.safetensors
expect 1 "overlaps the tensor before it" -- "$sgc" inspect overlap.safetensors
# Steps: a checkpoint's counter is a count; so is --steps.
expect 1 "sgc.step is -3" -- "$sgc" train train.so --data "$data" --steps 1 --load negative.safetensors
expect 1 "sgc.step is 9223372036854775807" -- "$sgc" train train.so --data "$data" --steps 1 --load huge.safetensors
expect 1 "sgc.step is -3" -- "$sgc" train "$src/samples/mlp_train.onnx" --data "$data" --steps 1 --load negative.safetensors
expect 2 "--steps expects an integer" -- "$sgc" train train.so --data "$data" --steps 99999999999999999999
# Wrong numbers the library would have clamped or applied: refused, nothing updated.
expect 1 "input 'labels' holds 1000" -- "$sgc" train train.so --data labels.safetensors --steps 3
expect 1 "the loss is nan: the step was not applied" -- "$sgc" train train.so --data nan.safetensors --steps 3
# Models: a graph input listed twice; a folded constant larger than memory.
$py - "$src" <<'PY'
import sys, onnx, numpy as np
from onnx import helper, numpy_helper, TensorProto
m = onnx.load(sys.argv[1] + "/samples/mlp.onnx"); m.graph.input.append(m.graph.input[0]); onnx.save(m, "twice.onnx")
g = helper.make_graph([helper.make_node("ConstantOfShape", ["s"], ["y"])], "huge", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                      [numpy_helper.from_array(np.array([10**6, 10**6], np.int64), "s")])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "huge.onnx")
PY
expect 1 "graph input 'x' is listed twice" -- "$sgc" inspect twice.onnx
$py -c "import sys; sys.path.insert(0, '$src/tests/pyutil'); import st; st.write('none.safetensors', {})"
expect 1 "out of memory evaluating it" -- "$sgc" run huge.onnx --inputs none.safetensors -o y.safetensors
# Outputs: a pipe is written, not replaced; a link is followed; the library and missing folders are refused first.
(cat pipe > from-pipe.txt &)
"$sgc" compile "$src/samples/mlp.onnx" --emit=ir -o pipe && sleep 1
[ -p pipe ] && grep -q "graph @" from-pipe.txt && echo "ok: -o into a pipe writes it" || { echo "FAIL: -o into a pipe"; failures=$((failures + 1)); }
echo old > real.txt && ln -s real.txt link.txt
"$sgc" compile "$src/samples/mlp.onnx" --emit=ir -o link.txt
[ -L link.txt ] && grep -q "graph @" real.txt && echo "ok: -o through a link writes its target" || { echo "FAIL: -o through a link"; failures=$((failures + 1)); }
expect 1 "which this run reads" -- "$sgc" train train.so --data "$data" --steps 1 --save train.so
expect 1 "the folder /nonexistent does not exist" -- "$sgc" train train.so --data "$data" --steps 1 --trace /nonexistent/t.json
expect 1 "which this run reads" -- "$sgc" train train.so --data "$data" --steps 1 --metrics "$data"
expect 1 "does not exist" -- "$sgc" train train.so --data "$data" --steps 1 --save "$tmp/no/such/ck.safetensors"
[ ! -s out.txt ] && echo "ok: no step ran before the --save error" || { echo "FAIL: trained before refusing --save"; failures=$((failures + 1)); }
# Libraries are inspected as files: a truncated one is an error, a foreign one's code never runs.
head -c 100000 train.so > cut.so
expect 1 "not a complete ELF file" -- "$sgc" inspect cut.so
printf '#include <stdio.h>\n__attribute__((constructor)) static void evil(void) { fclose(fopen("%s/ran", "w")); }\n' "$tmp" > evil.c
cc -shared -fPIC evil.c -o evil.so
expect 1 "no section .sgc_program" -- "$sgc" inspect evil.so
[ ! -e ran ] && echo "ok: inspect did not run the library's code" || { echo "FAIL: inspect ran evil.so's constructor"; failures=$((failures + 1)); }
echo "cli hostile: $failures failures"
[ "$failures" = 0 ]
