# The weights' bf16 copies that the optimizer keeps (ir/passes/ShadowWeights.h): a library
# compiled with --precision bf16 --optimizer adamw casts its weights to bf16 only when a copy may
# be stale, and these checks fail if a copy ever is:
# - the optimizer's copy is the cast: 8 steps with no views (the casts run once) give the same
#   losses, bit for bit, as 8 steps of a session whose view of a weight makes every step cast;
# - a write through a view is what the next step (training or evaluation) reads: the same loss as
#   the same write through sgc_set_tensor, and not the loss without it;
# - a step whose loss is NaN changes no parameter, moment or copy;
# - a checkpoint holds no copies, and loading one into a session that already stepped gives the
#   next step of the session that saved it;
# - the losses are the reference interpreter's (`sgc train` on the ONNX file, which casts every
#   step), within bf16's rounding.
# Usage: shadow_weights.py SGC SOURCE_DIR WORK_DIR
import json, os, subprocess, sys

sgc_bin, src, work = sys.argv[1:4]
sys.path[:0] = [os.path.join(src, "python"), os.path.join(src, "tests", "pyutil")]
import numpy as np
import sgc
import st

os.makedirs(work, exist_ok=True)
model, data_path = os.path.join(src, "samples", "mlp_train.onnx"), os.path.join(src, "samples", "mlp_train_data.safetensors")
flags = ["--optimizer", "adamw", "--lr", "1e-2", "--precision", "bf16"]
so = os.path.join(work, "train.so")
stats = subprocess.run([sgc_bin, "compile", model, "-o", so, "--target", "cpu", "--stats", "--quiet"] + flags,
                       capture_output=True, text=True, check=True).stderr
assert "weights' bf16 copies kept by the optimizer: 6 " in stats, stats  # the three layers' weights and biases
data = st.read(data_path)
batch = lambda i: {k: v[i % v.shape[0]] for k, v in data.items()}
lib = sgc.load(so)
W = "mlp.fc1.weight"


def train(s, steps, first=0, write_at=None, how=None):
    """`steps` steps from batch `first`; before step `write_at`, fc1's weight halved through `how`."""
    losses = []
    for i in range(first, first + steps):
        if i == write_at:
            if how == "view":
                view = s.parameters()[W]  # through sgc_tensor_view
                view *= 0.5
            else:
                s.load_state_dict({W: s.state_dict()[W] * 0.5}, strict=False)  # sgc_set_tensor
        losses.append(s.step(**batch(i)))
    return losses


with lib.session() as a, lib.session() as b:
    s_names = a.state_dict(state=True)
    assert not [n for n in s_names if "copy" in n], sorted(s_names)  # the copies are the library's own
    plain = train(a, 8)
    b.parameters()  # views of every parameter: each step casts them again
    assert train(b, 8) == plain, (plain, "!=")
    print("no views and views: the same 8 losses", plain[-1])

with lib.session() as c, lib.session() as d:
    via_view, via_set = train(c, 4, write_at=2, how="view"), train(d, 4, write_at=2, how="set")
    assert via_view == via_set and via_view[2] != plain[2], (via_view, via_set, plain[:4])
    # An evaluation step reads a write made between steps too (no view held in this session).
    with lib.session() as e:
        train(e, 2)
        e.load_state_dict({W: np.zeros_like(e.state_dict()[W])}, strict=False)
        zeroed = e.eval_step(**batch(0))
    with lib.session() as f:
        train(f, 2)
        unchanged = f.eval_step(**batch(0))
    assert zeroed != unchanged, (zeroed, unchanged)
    print("a write through a view or sgc_set_tensor reaches the next step:", via_view[2], "against", plain[2])

# A step whose loss is not finite changes nothing: parameters, moments, copies (the next steps are
# those of a session that never took it).
with lib.session() as n, lib.session() as m:
    train(n, 2)
    before = n.state_dict(state=True)
    bad = dict(batch(2), x=np.full_like(batch(2)["x"], np.nan))
    try:
        n.step(**bad)
        raise AssertionError("a NaN loss was applied")
    except sgc.SgcError as e:
        assert "not applied" in str(e), e
    after = n.state_dict(state=True)
    assert all(np.array_equal(before[k], after[k]) for k in before), [k for k in before if not np.array_equal(before[k], after[k])]
    assert train(n, 2, first=2) == train(m, 4)[2:]
    print("a step with a NaN loss leaves everything as it was")

ck = os.path.join(work, "ck.safetensors")
with lib.session() as g, lib.session() as h:
    train(g, 3)
    g.save(ck)
    assert not [n for n in st.read(ck) if "copy" in n], sorted(st.read(ck))
    next_g = train(g, 2, first=3)
    train(h, 1)  # its copies are current for its own weights, which the checkpoint replaces
    h.load(ck)
    assert train(h, 2, first=3) == next_g, next_g
    print("a loaded checkpoint's next steps:", next_g)

# The interpreter casts the weights every step: the same losses within bf16's rounding.
out = subprocess.run([sgc_bin, "train", model, "--data", data_path, "--steps", "8"] + flags, capture_output=True, text=True, check=True).stdout
want = [json.loads(line)["loss"] for line in out.splitlines()]
worst = max(abs(x - y) / abs(y) for x, y in zip(plain, want))
assert worst < 2e-2, (plain, want)
print(f"against the interpreter: {worst:.1e} at most (relative), limit 2e-2")
