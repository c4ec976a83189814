#!/bin/sh
# The compiled .so: the same model and options give a bit-identical file
# whatever the folder or time; it needs only the C library and libm; it
# exports only sgc_*; the C and Python hosts in samples/ train it.
# Usage: so_checks.sh SGC SOURCE_DIR BUILD_DIR
set -eu
sgc=$1 src=$2 build=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/a" "$tmp/b/deeper"
cp "$src/samples/mlp_train.onnx" "$tmp/a/model.onnx"
cp "$src/samples/mlp_train.onnx" "$tmp/b/deeper/model.onnx"
(cd "$tmp/a" && "$sgc" compile model.onnx -o train.so --optimizer adamw)
sleep 1
(cd "$tmp/b/deeper" && SOURCE_DATE_EPOCH=1 "$sgc" compile "$tmp/b/deeper/model.onnx" -o "$tmp/b/train.so" --optimizer adamw)
cmp "$tmp/a/train.so" "$tmp/b/train.so" || { echo "FAIL: two compiles differ"; exit 1; }
echo "reproducible: ok ($(wc -c < "$tmp/a/train.so") bytes)"
libs=$(ldd "$tmp/a/train.so" | awk '{print $1}' | grep -v -E '^(linux-vdso|/lib64/ld-linux|libc\.so|libm\.so)' || true)
[ -z "$libs" ] || { echo "FAIL: unexpected libraries: $libs"; exit 1; }
echo "ldd: only libc and libm"
exported=$(nm -D --defined-only "$tmp/a/train.so" | awk '{print $3}' | grep -v '^sgc_' || true)
[ -z "$exported" ] || { echo "FAIL: exports beyond sgc_*: $exported"; exit 1; }
echo "exports: only sgc_* ($(nm -D --defined-only "$tmp/a/train.so" | wc -l) symbols)"
cc -I "$src/runtime/include" "$src/samples/train_c.c" -o "$tmp/train_c" -ldl
"$tmp/train_c" "$tmp/a/train.so" 3 | tee "$tmp/c.out"
[ "$(grep -c '^step' "$tmp/c.out")" = 3 ] || { echo "FAIL: the C host"; exit 1; }
/usr/bin/python3 "$src/samples/train_ctypes.py" "$tmp/a/train.so" "$src/samples/mlp_train_data.safetensors" 3 > "$tmp/py.out"
"$sgc" train "$tmp/a/train.so" --data "$src/samples/mlp_train_data.safetensors" --steps 3 > "$tmp/sgc.out"
# The Python host and `sgc train` feed the same batches: the losses agree.
/usr/bin/python3 - "$tmp/py.out" "$tmp/sgc.out" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) == 3 and all(abs(x - y) <= 1e-6 * abs(y) for x, y in zip(a, b)), (a, b)
print("python ctypes host: ok", a)
PY
# The misuse test is built with AddressSanitizer and UBSan where the compiler has them (the
# host's side of every call checked; the library's runtime is not instrumented).
san="-fsanitize=address,undefined -fno-omit-frame-pointer"
echo 'int main(void){return 0;}' > "$tmp/san.c"
cc $san "$tmp/san.c" -o "$tmp/san" 2>/dev/null && "$tmp/san" || { san=""; echo "abi misuse: no sanitizers here"; }
cc $san -I "$src/runtime/include" "$src/tests/runtime/abi_misuse.c" -o "$tmp/abi_misuse" -ldl
ASAN_OPTIONS=detect_leaks=0 "$tmp/abi_misuse" "$tmp/a/train.so"
# Loading and unloading the library does not leak.
cc -I "$src/runtime/include" "$src/tests/runtime/reload.c" -o "$tmp/reload" -ldl
"$tmp/reload" "$tmp/a/train.so" 500
# --weights external | none: same losses as embedded weights; none needs a checkpoint loaded first.
(cd "$tmp/a" && "$sgc" compile model.onnx -o ext.so --optimizer adamw --target cpu --weights external \
  && "$sgc" compile model.onnx -o none.so --optimizer adamw --target cpu --weights none)
data="$src/samples/mlp_train_data.safetensors"
# same_losses A B: two runs' JSON lines agree in every step and loss (their timing fields differ run to run).
losses() { sed 's/, "ms": .*}$/}/' "$1"; }
same_losses() { [ -s "$1" ] && [ "$(losses "$1")" = "$(losses "$2")" ]; }
"$sgc" train "$tmp/a/train.so" --data "$data" --steps 3 > "$tmp/emb.out"
"$sgc" train "$tmp/a/ext.so" --data "$data" --steps 3 > "$tmp/ext.out"
same_losses "$tmp/emb.out" "$tmp/ext.out" || { echo "FAIL: external weights train differently"; exit 1; }
if "$sgc" train "$tmp/a/none.so" --data "$data" --steps 1 2> "$tmp/none.err"; then echo "FAIL: --weights none trained unloaded"; exit 1; fi
grep -q "call sgc_load first" "$tmp/none.err" || { echo "FAIL: unclear error: $(cat "$tmp/none.err")"; exit 1; }
"$sgc" train "$tmp/a/none.so" --data "$data" --steps 3 --load "$tmp/a/ext.weights.safetensors" > "$tmp/none.out"
same_losses "$tmp/emb.out" "$tmp/none.out" || { echo "FAIL: --weights none with loaded weights trains differently"; exit 1; }
[ "$(stat -c %s "$tmp/a/ext.so")" -lt "$(stat -c %s "$tmp/a/train.so")" ] || { echo "FAIL: external weights do not shrink the .so"; exit 1; }
echo "weights embedded / external / none: ok"
# --trace: the last step's Chrome trace, a complete event per launch on the compute thread, in order; the losses unchanged.
"$sgc" train "$tmp/a/train.so" --data "$data" --steps 3 --trace "$tmp/trace.json" > "$tmp/traced.out"
same_losses "$tmp/traced.out" "$tmp/emb.out" || { echo "FAIL: --trace changes the losses"; exit 1; }
launches=$("$sgc" inspect "$tmp/a/train.so" | sed -n 's/.*launches per step: \([0-9]*\),.*/\1/p')
/usr/bin/python3 - "$tmp/trace.json" "$launches" <<'PY' || { echo "FAIL: the trace"; exit 1; }
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X" and e["tid"] == 0]
assert len(events) == int(sys.argv[2]), (len(events), sys.argv[2])
assert [e["args"]["launch"] for e in events] == sorted(e["args"]["launch"] for e in events)
for a, b in zip(events, events[1:]):
    assert a["dur"] >= 0 and a["ts"] + a["dur"] <= b["ts"] + 1e-3, (a, b)  # one after another
assert all(e["name"] and e["args"]["kernel"].startswith("sgc_k") and e["args"]["bytes"] > 0 for e in events)
print(f"trace: {len(events)} launches, {sum(e['dur'] for e in events):.1f} us of kernels")
PY
"$sgc" train "$src/samples/mlp_train.onnx" --data "$data" --steps 1 --trace "$tmp/x.json" 2> "$tmp/trace.err" && { echo "FAIL: --trace on the interpreter"; exit 1; }
grep -q "compile" "$tmp/trace.err" || { echo "FAIL: unclear --trace error: $(cat "$tmp/trace.err")"; exit 1; }
# --cache-dir: the second compile of the same model and options is a cache hit with the same bytes.
(cd "$tmp/a" && "$sgc" compile model.onnx -o c1.so --optimizer adamw --cache-dir cache --stats 2> c1.err \
  && "$sgc" compile model.onnx -o c2.so --optimizer adamw --cache-dir cache --stats 2> c2.err)
grep -q "cache: hit" "$tmp/a/c2.err" && ! grep -q "cache: hit" "$tmp/a/c1.err" || { echo "FAIL: no cache hit"; exit 1; }
cmp "$tmp/a/c1.so" "$tmp/a/c2.so" && cmp "$tmp/a/c1.so" "$tmp/a/train.so" || { echo "FAIL: cached library differs"; exit 1; }
echo "cache: ok"
# --stats reports ptxas's registers a kernel (c1.so, compiled with --stats, is train.so's bytes: above).
gpu_kernels=$(sed -n 's/^GPU sm_90, ptxas: \([0-9]*\) kernels, .*fewest warps an SM by registers (of 64): sgc_.* (.* registers x .* threads.*$/\1/p' "$tmp/a/c1.err")
[ "${gpu_kernels:-0}" -gt 0 ] || { echo "FAIL: no ptxas report in --stats: $(cat "$tmp/a/c1.err")"; exit 1; }
echo "stats: ptxas's registers for $gpu_kernels GPU kernels"
# --recompute: the same losses with a smaller activation peak.
for mode in none fused cheap selective full; do
  (cd "$tmp/a" && "$sgc" compile model.onnx -o "r_$mode.so" --optimizer adamw --target cpu --recompute "$mode" --stats 2> "r_$mode.err")
  "$sgc" train "$tmp/a/r_$mode.so" --data "$data" --steps 3 > "$tmp/r_$mode.out"
  same_losses "$tmp/r_$mode.out" "$tmp/emb.out" || { echo "FAIL: --recompute $mode changes the losses"; exit 1; }
done
peak() { sed -n 's/.*(activations \([0-9]*\),.*/\1/p' "$tmp/a/r_$1.err"; }
[ "$(peak fused)" -le "$(peak none)" ] && [ "$(peak cheap)" -le "$(peak none)" ] && [ "$(peak selective)" -lt "$(peak none)" ] && [ "$(peak full)" -le "$(peak selective)" ] ||
  { echo "FAIL: activation peaks $(peak none) $(peak fused) $(peak cheap) $(peak selective) $(peak full)"; exit 1; }
echo "recompute: activations $(peak none) -> $(peak fused) (fused) -> $(peak cheap) (cheap) / $(peak selective) (selective) -> $(peak full) (full) bytes, same losses"
# sgc inspect --plan-svg: the plan as a picture, a bar per tensor over its lifetime; the same library, the same bytes.
for mode in none full; do "$sgc" inspect "$tmp/a/r_$mode.so" --plan-svg "$tmp/plan_$mode.svg" > /dev/null || { echo "FAIL: --plan-svg"; exit 1; }; done
"$sgc" inspect "$tmp/a/r_none.so" --plan-svg "$tmp/plan_again.svg" > /dev/null && cmp -s "$tmp/plan_none.svg" "$tmp/plan_again.svg" ||
  { echo "FAIL: two pictures of one plan differ"; exit 1; }
/usr/bin/python3 - "$tmp/plan_none.svg" "$tmp/plan_full.svg" <<'PY' || { echo "FAIL: the plan's picture"; exit 1; }
import re, sys
import xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
def bars(path):
    out = {}
    for r in ET.parse(path).getroot().iter(ns + "rect"):
        t = r.find(ns + "title")
        if t is not None:
            m = re.fullmatch(r"(\S+): ([\d,]+) bytes, (\w+), live \[(\d+), (\d+)\]", t.text)
            assert m, t.text
            out[m[1]] = (int(m[2].replace(",", "")), m[3], int(m[4]), int(m[5]), float(r.get("height")))
    return out
none, full = bars(sys.argv[1]), bars(sys.argv[2])
assert none["mlp.fc1.weight"][:2] == (2048, "params"), none["mlp.fc1.weight"]  # 16 x 32 f32
acts = lambda b: [v for v in b.values() if v[1] == "activations"]
assert acts(none) and all(v[2] <= v[3] for v in none.values())
span = lambda b: sum(v[0] * (v[3] - v[2] + 1) for v in acts(b))  # bytes x positions held
assert span(full) != span(none), (span(none), span(full))  # recomputation holds activations for less of the step
print(f"plan picture: {len(none)} bars ({len(acts(none))} activations), byte-positions held {span(none)} -> {span(full)} with --recompute full")
PY
"$sgc" inspect "$src/samples/mlp_train.onnx" --plan-svg "$tmp/x.svg" 2> "$tmp/svg.err" && { echo "FAIL: --plan-svg of a model"; exit 1; }
grep -q "give it LIB.so" "$tmp/svg.err" || { echo "FAIL: unclear --plan-svg error: $(cat "$tmp/svg.err")"; exit 1; }
# --data-parallel allreduce on one rank: several buckets, the same losses.
(cd "$tmp/a" && "$sgc" compile model.onnx -o dp.so --optimizer adamw --target cpu --data-parallel allreduce --bucket-mb 0.001)
"$sgc" train "$tmp/a/dp.so" --data "$data" --steps 3 > "$tmp/dp.out"
same_losses "$tmp/dp.out" "$tmp/emb.out" || { echo "FAIL: --data-parallel allreduce (one rank) changes the losses"; exit 1; }
nb=$(cd "$tmp/a" && "$sgc" compile model.onnx --optimizer adamw --data-parallel allreduce --bucket-mb 0.001 --emit=ir | grep -c "= AllReduce(.*bucket[0-9]")
[ "$nb" -gt 1 ] || { echo "FAIL: expected several all-reduce buckets, got $nb"; exit 1; }
echo "data-parallel: $nb buckets, same losses"
echo "so checks: ok"
