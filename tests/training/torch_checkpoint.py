# Checkpoints PyTorch reads and writes: sgc's safetensors checkpoint names each parameter as the
# model's state_dict does and its AdamW moments as torch.optim.AdamW's state does (NAME.exp_avg,
# NAME.exp_avg_sq, and the step counter sgc.step). For the MLP and the GPT (tied head) of
# torch_equivalence.py, trained with AdamW:
#   sgc -> PyTorch: sgc trains 3 steps and saves; PyTorch loads the parameters with
#     load_state_dict and the moments into its optimizer, and its next 2 losses are sgc's own
#     next 2 (sgc train --load);
#   PyTorch -> sgc: PyTorch trains 3 steps and writes the same names; sgc loads the file and its
#     next 2 losses are PyTorch's.
# Usage: torch_checkpoint.py SGC WORK_DIR
import json, os, subprocess, sys
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_equivalence as te  # noqa: E402
st = te.st

sgc, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
LR, WD, FIRST, NEXT = 1e-2, 0.01, 3, 2


def optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)


def torch_steps(model, opt, xs, ys, steps, first):
    losses = []
    for i in range(first, first + steps):
        loss = model(xs[i % te.BATCHES], ys[i % te.BATCHES])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def sgc_train(so, data, steps, load=None, save=None):
    cmd = [sgc, "train", so, "--data", data, "--steps", str(steps)] + (["--load", load] if load else []) + (["--save", save] if save else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [json.loads(line)["loss"] for line in out.splitlines()]


def close(a, b, what):
    worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
    assert len(a) == len(b) and worst <= 1e-5, f"{what}: {a} vs {b}"
    return worst


def check(name, cls):
    torch.manual_seed(0)
    model = cls()
    xs, ys = te.data_for(name, torch.Generator().manual_seed(1))
    onnx_path, data = os.path.join(work, name + ".onnx"), os.path.join(work, name + "_data.safetensors")
    torch.onnx.export(model, (xs[0], ys[0]), onnx_path, input_names=["x", "y"], output_names=["loss"], opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    st.write(data, {"x": xs, "y": ys})
    init = {k: v.clone() for k, v in model.state_dict().items()}
    so = os.path.join(work, name + ".so")
    subprocess.run([sgc, "compile", onnx_path, "-o", so, "--optimizer", "adamw", "--lr", str(LR), "--weight-decay", str(WD), "--target", "cpu",
                    "--quiet"], check=True)
    names = [n for n, _ in model.named_parameters()]  # tied parameters once, as the optimizer sees them

    # sgc -> PyTorch
    ck = os.path.join(work, name + "_sgc.safetensors")
    sgc_train(so, data, FIRST, save=ck)
    sgc_next = sgc_train(so, data, NEXT, load=ck)
    saved = st.read(ck)
    model.load_state_dict(init)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in saved.items() if k in init}, strict=False)
    assert not [m for m in missing if m in names], f"{name}: the checkpoint lacks parameters {missing}"
    opt = optimizer(model)
    step = float(saved["sgc.step"])
    assert step == FIRST, saved["sgc.step"]
    for n, p in model.named_parameters():
        opt.state[p] = {"step": torch.tensor(step), "exp_avg": torch.from_numpy(np.array(saved[n + ".exp_avg"])),
                        "exp_avg_sq": torch.from_numpy(np.array(saved[n + ".exp_avg_sq"]))}
    to_torch = close(torch_steps(model, opt, xs, ys, NEXT, FIRST), sgc_next, f"{name}: PyTorch after sgc's checkpoint")

    # PyTorch -> sgc
    model.load_state_dict(init)
    opt = optimizer(model)
    torch_steps(model, opt, xs, ys, FIRST, 0)
    out = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    for n, p in model.named_parameters():
        out[n + ".exp_avg"] = opt.state[p]["exp_avg"].numpy().copy()
        out[n + ".exp_avg_sq"] = opt.state[p]["exp_avg_sq"].numpy().copy()
    out["sgc.step"] = np.array(int(opt.state[next(iter(model.parameters()))]["step"]), dtype=np.int64)
    ck2 = os.path.join(work, name + "_torch.safetensors")
    st.write(ck2, out)
    torch_next = torch_steps(model, opt, xs, ys, NEXT, FIRST)
    to_sgc = close(sgc_train(so, data, NEXT, load=ck2), torch_next, f"{name}: sgc after PyTorch's checkpoint")
    print(f"{name}: {len(names)} parameters; next {NEXT} losses after the other's checkpoint: PyTorch {to_torch:.1e}, sgc {to_sgc:.1e} relative")


check("mlp", te.MLP)
check("gpt", te.GPT)
