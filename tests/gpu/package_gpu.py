# The Python package (python/sgc) on a GPU, as a PyTorch host uses it: the session on torch's
# current stream, inputs passed as CUDA tensors, parameters shared with torch through DLPack,
# the step's trace, and the ABI's messages in exceptions. Runs in the GPU bundle beside the
# package (check_gpu.sh), after train_ctypes.py trained the same library with host inputs.
# With a bf16 library of the same model (BF16.so), the weights' bf16 copies its optimizer keeps
# (ir/passes/ShadowWeights.h): steps with views out match those without, and a write through a
# view or sgc_set_tensor reaches the next step.
# Usage: python3 package_gpu.py LIB.so DATA.safetensors REFERENCE.out (train_ctypes.py's JSON lines) [BF16.so]
import json, os, sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sgc  # noqa: E402

lib_path, data_path, reference = sys.argv[1:4]
want = [json.loads(line)["loss"] for line in open(reference)]
stream = torch.cuda.Stream()  # a stream of torch's own (its legacy default one cannot be shared)
torch.cuda.set_stream(stream)
data = {k: v.cuda() for k, v in load_file(data_path).items()}
failures = []

s = sgc.load(lib_path).session("cuda:0", stream=torch.cuda.current_stream())
params = s.parameters()  # torch tensors over the session's memory
assert all(p.is_cuda for p in params.values()), "parameters() are not CUDA tensors"
got = []
for step in range(len(want)):
    got.append(s.step(**{k: v[step % v.shape[0]].contiguous() for k, v in data.items()}))
worst = max(abs(a - b) / abs(b) for a, b in zip(got, want))
print(f"package on torch's stream with CUDA inputs: {len(got)} steps, max relative loss difference against host inputs {worst:.2e}")
if worst > 1e-4:
    failures.append("losses")

# The views are the session's memory: the update of each step shows in them, and torch's write is
# what the next step reads.
name = next(iter(params))
copy = s.state_dict()[name]
if not torch.equal(params[name].cpu(), torch.from_numpy(copy)):
    failures.append("a view differs from the parameter's copy")
batch = {k: v[0].contiguous() for k, v in data.items()}
before = s.eval_step(**batch)
with torch.no_grad():
    params[name].mul_(0.5)
halved = s.eval_step(**batch)
with torch.no_grad():
    params[name].mul_(2)
again = s.eval_step(**batch)
print(f"a torch-side write: loss {before:.6f} -> {halved:.6f} with {name} halved -> {again:.6f} restored")
if abs(halved - before) <= 1e-4 * abs(before) or abs(again - before) > 1e-6 * abs(before):  # GPU sums may reorder
    failures.append("torch's writes into the views")

# The trace of a GPU step: every launch on its stream, in order, with its kernel and bytes.
trace = os.path.abspath("package_gpu.trace.json")
s.trace_next_step(trace)
s.step(**batch)
events = [e for e in json.load(open(trace))["traceEvents"] if e["ph"] == "X"]
streams = {e["tid"] for e in events}
ordered = all(a["ts"] <= b["ts"] + 1e-3 for a, b in zip(events, events[1:]) if a["tid"] == b["tid"] == 0)
named = all(e["args"].get("kernel") and e["dur"] >= 0 for e in events)
print(f"GPU trace: {len(events)} launches on streams {sorted(streams)}, {sum(e['dur'] for e in events):.1f} us of kernels")
if not events or not ordered or not named or not streams <= {0, 1}:
    failures.append("the trace")

# The ABI's message in the exception: a CUDA tensor of the wrong dtype.
k, v = next(iter(batch.items()))
try:
    s.step(**{k: v.to(torch.float64 if not v.is_floating_point() else torch.int32)})
    failures.append("a wrong dtype was taken")
except sgc.SgcError as e:
    print("a wrong dtype:", str(e)[:120])
    if "expects dtype" not in str(e):
        failures.append("the message")
s.close()

if len(sys.argv) > 4:
    lib16 = sgc.load(sys.argv[4])
    batches = [{k: v[i % v.shape[0]].contiguous() for k, v in data.items()} for i in range(4)]
    a, b = (lib16.session("cuda:0", stream=torch.cuda.current_stream()) for _ in range(2))
    views = b.parameters()  # from here on every step of b casts the weights again
    plain, viewed = [a.step(**x) for x in batches], [b.step(**x) for x in batches]
    worst = max(abs(x - y) / abs(y) for x, y in zip(plain, viewed))
    name = next(n for n in views if n.endswith("weight") and views[n].dim() == 2)
    before = b.eval_step(**batches[0])
    with torch.no_grad():
        views[name].mul_(0.5)
    halved = b.eval_step(**batches[0])
    with torch.no_grad():
        views[name].mul_(2)
    again = b.eval_step(**batches[0])
    w, a_before = a.state_dict()[name], a.eval_step(**batches[0])
    a.load_state_dict({name: w * 0.5}, strict=False)
    halved_set = a.eval_step(**batches[0])
    print(f"bf16 copies kept by the optimizer: 4 steps with views out against none, {worst:.1e} at most (relative); "
          f"{name} halved through a view: {before:.6f} -> {halved:.6f} -> {again:.6f} restored; through sgc_set_tensor {a_before:.6f} -> {halved_set:.6f}")
    if worst > 1e-4:
        failures.append("the bf16 copies with views out")
    if abs(halved - before) <= 1e-3 * abs(before) or abs(again - before) > 1e-5 * abs(before) or abs(halved_set - a_before) <= 1e-3 * abs(a_before):
        failures.append("a write through a view of a bf16 library")
    a.close(), b.close()
print("package on the GPU:", "FAILED: " + ", ".join(failures) if failures else "ok")
sys.exit(1 if failures else 0)
