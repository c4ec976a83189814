# PyTorch equivalence of training on the reference interpreter: four models
# written here (an MLP with LayerNorm, GELU and a residual under MSE + L1; a
# small CNN with Conv, BatchNorm, ReLU and pooling under log-softmax + NLL; a
# small U-Net whose decoder upsamples by bilinear and nearest interpolation
# (ONNX Resize) under MSE; a
# 2-layer GPT-style decoder with token and position embeddings, a tied output
# projection, causal masked attention (as written, and fused into one op with
# --attention fused), tanh-GELU and cross-entropy; and a 2-layer Llama-style
# decoder (bench/gpu_models.py's, tiny: RMSNorm, rotary positions, SwiGLU, 4
# query heads over 2 key/value heads, as written and fused with each key and
# value head read once per group), exported
# with torch.onnx.export in training mode, then trained from the same weights
# on the same data by PyTorch and by `sgc train` with each optimizer, both on
# the reference interpreter and through the model compiled to a .so (sgc
# compile). Per-step losses must agree within 1e-4 relative and final
# parameters within 1e-3; each model compiled with --precision bf16 must stay
# close to its f32 build (first step within 1e-2, 12 steps within 5e-2). Usage: /usr/bin/python3 torch_equivalence.py SGC WORKDIR
import json, math, os, subprocess, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyutil"))
import st  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import gpu_models  # noqa: E402

STEPS, BATCHES = 12, 3
LOSS_RTOL, PARAM_TOL = 1e-4, 1e-3
# bf16 mixed precision against the f32 build: the first step (identical weights) within
# 1e-2; over 12 AdamW steps at lr 1e-2 the trajectories drift apart (measured up to 2.5e-2
# for the CNN), so whole runs within 5e-2. The 2e-2 of the GPU issue compares the same bf16
# program on the GPU and the CPU (tests/gpu/check_gpu.sh).
BF16_FIRST_RTOL, BF16_RTOL = 1e-2, 5e-2


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 16)
        self.norm, self.head = nn.LayerNorm(16), nn.Linear(16, 4)

    def forward(self, x, y):
        h = self.norm(x + self.fc2(F.gelu(self.fc1(x))))
        out = self.head(h)
        # MSE and L1 written out, as exporters emit them (torch 1.13 exports no mse_loss op).
        return ((out - y) ** 2).mean() + 0.1 * (out - y).abs().mean()


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        # Convolutions before BatchNorm carry no bias (as usual): BatchNorm subtracts the batch mean,
        # so such a bias has an identically zero gradient that Adam would turn into rounding noise.
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 2 * 2, 5)

    def forward(self, x, y):
        h = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        h = F.avg_pool2d(F.relu(self.b2(self.c2(h))), 2)
        return F.nll_loss(F.log_softmax(self.fc(h.flatten(1)), dim=1), y)


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc, self.mid = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.dec = nn.Conv2d(24, 3, 3, padding=1)

    def forward(self, x, y):
        e = torch.tanh(self.enc(x))
        m = torch.tanh(self.mid(F.avg_pool2d(e, 2)))
        up = F.interpolate(m, scale_factor=2, mode="bilinear", align_corners=False)
        coarse = F.interpolate(F.max_pool2d(e, 4), scale_factor=4, mode="nearest")
        out = self.dec(torch.cat([e, up, coarse], 1))
        return ((out - y) ** 2).mean()


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        # No qkv bias: the key bias has an identically zero gradient (softmax is shift-invariant), so
        # under Adam its update is the ratio of two rounding noises that no two implementations share.
        self.ln1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d)
        self.ln2, self.fc, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = [t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        causal = torch.ones(T, T, dtype=torch.bool).tril().view(1, 1, T, T)  # a constant in the exported graph
        att = F.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=32, T=8, d=16, layers=2, heads=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(T, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.lnf, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied
        self.register_buffer("pos", torch.arange(T))

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(self.pos)
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.lnf(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))


def TinyLlama():
    """Grouped-query attention as Hugging Face's repeat_kv writes it: 4 query heads over 2 key/value heads."""
    return gpu_models.Llama(V=32, d=16, L=2, h=4, kv=2, f=32, explicit=True)


def data_for(name, g):
    if name == "mlp":
        return torch.randn(BATCHES, 8, 16, generator=g), torch.randn(BATCHES, 8, 4, generator=g)
    if name == "cnn":
        return torch.randn(BATCHES, 6, 3, 8, 8, generator=g), torch.randint(0, 5, (BATCHES, 6), generator=g)
    if name == "unet":
        return torch.randn(BATCHES, 6, 3, 8, 8, generator=g), torch.randn(BATCHES, 6, 3, 8, 8, generator=g)
    return torch.randint(0, 32, (BATCHES, 4, 8), generator=g), torch.randint(0, 32, (BATCHES, 4, 8), generator=g)


OPTIMIZERS = {
    "sgd-nesterov": (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
                     ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--nesterov", "--weight-decay", "1e-3"], 0),
    "sgd-dampening": (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.5, dampening=0.2),
                      ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.5", "--dampening", "0.2"], 0),
    "adam": (lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=1e-3),
             ["--optimizer", "adam", "--lr", "1e-2", "--weight-decay", "1e-3"], 0),
    "adamw-clip": (lambda p: torch.optim.AdamW(p, lr=1e-2, betas=(0.8, 0.99)),
                   ["--optimizer", "adamw", "--lr", "1e-2", "--betas", "0.8,0.99", "--clip-grad-norm", "0.5"], 0.5),
}


def run_sgc(sgc, work, name, opt_name, flags, engine, onnx_path, data_path, model, ref):
    """Trains with sgc (interpreter or compiled .so); returns a table row."""
    ckpt = os.path.join(work, f"{name}_{opt_name}_{engine}.safetensors")
    target = onnx_path
    if engine == "compiled":
        target = os.path.join(work, f"{name}_{opt_name}.so")
        proc = subprocess.run([sgc, "compile", onnx_path, "-o", target] + flags, capture_output=True, text=True)
        if proc.returncode != 0:
            return (name, opt_name, engine, None, None, proc.stderr.strip())
        flags = []  # the optimizer and its settings are compiled in
    proc = subprocess.run([sgc, "train", target, "--data", data_path, "--steps", str(STEPS), "--save", ckpt] + flags,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return (name, opt_name, engine, None, None, proc.stderr.strip())
    got = [json.loads(line)["loss"] for line in proc.stdout.splitlines()]
    loss_rel = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, ref)) if len(got) == STEPS else float("inf")
    saved = st.read(ckpt)
    param_diff = 0.0
    # BatchNorm running means are updated as PyTorch does (running variances differ by
    # design: ONNX's BatchNormalization uses the biased batch variance, PyTorch the unbiased).
    for bname, buf in model.named_buffers():
        if bname.endswith("running_mean"):
            param_diff = max(param_diff, float(np.max(np.abs(saved[bname] - buf.numpy()))))
    for pname, p in model.named_parameters():
        if pname not in saved:
            return (name, opt_name, engine, None, None, f"parameter {pname} missing from the sgc checkpoint")
        param_diff = max(param_diff, float(np.max(np.abs(saved[pname] - p.detach().numpy()))))
    return (name, opt_name, engine, loss_rel, param_diff, "")


def run_model(sgc, work, name, cls):
    torch.manual_seed(0)
    model = cls()
    xs, ys = data_for(name, torch.Generator().manual_seed(1))
    onnx_path = os.path.join(work, name + ".onnx")
    data_path = os.path.join(work, name + "_data.safetensors")
    model.train()
    torch.onnx.export(model, (xs[0], ys[0]), onnx_path, input_names=["x", "y"], output_names=["loss"], opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    st.write(data_path, {"x": xs, "y": ys})
    # Tracing for the export ran the model once, updating BatchNorm's running statistics:
    # both sides start from the state the ONNX file holds.
    init = {k: v.clone() for k, v in model.state_dict().items()}
    rows = []
    for opt_name, (make_opt, flags, clip) in OPTIMIZERS.items():
        if name == "llama" and opt_name != "adam":
            continue  # the Llama checks its attention's forms, not the optimizers
        model.load_state_dict(init)
        opt = make_opt(model.parameters())
        ref = []
        for i in range(STEPS):
            loss = model(xs[i % BATCHES], ys[i % BATCHES])
            opt.zero_grad()
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            ref.append(loss.item())
        for engine in ("interpreter", "compiled"):
            rows.append(run_sgc(sgc, work, name, opt_name, flags, engine, onnx_path, data_path, model, ref))
            # Attention as the model writes it (the default), and fused into one op.
            if name in ("gpt", "llama") and opt_name == "adam":
                rows.append(run_sgc(sgc, work, name, opt_name + "-fused", flags + ["--attention", "fused"], engine, onnx_path,
                                    data_path, model, ref))
    if name == "llama":  # each layer's attention fused with its grouped keys and values
        proc = subprocess.run([sgc, "compile", onnx_path, "-o", os.path.join(work, "llama_stats.so"), "--attention", "fused", "--stats"],
                              capture_output=True, text=True)
        want = "fused attention nodes: 2 (with grouped keys and values: 2)"
        if want not in proc.stderr:
            rows.append((name, "adam-fused", "compiled", None, None, f"expected '{want}' in --stats: {proc.stderr.strip()[-300:]}"))
    return rows


def bf16_rows(sgc, work):
    """Mixed precision: each model compiled with --precision bf16 against its f32 build (12 AdamW steps);
    the GPT also with fused attention in both builds."""
    rows = []
    for name, extra in (("mlp", []), ("cnn", []), ("gpt", []), ("gpt", ["--attention", "fused"])):
        label = "bf16 vs f32" + (" fused" if extra else "")
        losses = {}
        for prec in ("f32", "bf16"):
            so = os.path.join(work, f"{name}_{prec}{'_fused' if extra else ''}.so")
            proc = subprocess.run([sgc, "compile", os.path.join(work, name + ".onnx"), "-o", so, "--target", "cpu", "--optimizer", "adamw",
                                   "--lr", "1e-2", "--precision", prec] + extra, capture_output=True, text=True)
            if proc.returncode == 0:
                proc = subprocess.run([sgc, "train", so, "--data", os.path.join(work, name + "_data.safetensors"), "--steps", str(STEPS)],
                                      capture_output=True, text=True)
            if proc.returncode != 0:
                rows.append((name, label, "compiled", None, None, proc.stderr.strip()))
                break
            losses[prec] = [json.loads(line)["loss"] for line in proc.stdout.splitlines()]
        else:
            diffs = [abs(a - b) / abs(b) for a, b in zip(losses["bf16"], losses["f32"])]
            first = "" if diffs[0] <= BF16_FIRST_RTOL else f"first step differs by {diffs[0]:.2e}"
            rows.append((name, label, "compiled", max(diffs), 0.0, first))
    return rows


def main():
    sgc, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rows = []
    for name, cls in (("mlp", MLP), ("cnn", CNN), ("unet", UNet), ("gpt", GPT), ("llama", TinyLlama)):
        rows += run_model(sgc, work, name, cls)
    rows += bf16_rows(sgc, work)
    ok = True
    print(f"{'model':6} {'optimizer':14} {'engine':12} {'max loss rel diff':>18} {'max param abs diff':>19}")
    for model, opt, engine, lrel, pdiff, err in rows:
        if err:
            ok = False
            print(f"{model:6} {opt:14} {engine:12} FAILED: {err}")
            continue
        good = lrel <= (BF16_RTOL if opt.startswith("bf16") else LOSS_RTOL) and pdiff <= PARAM_TOL
        ok &= good
        print(f"{model:6} {opt:14} {engine:12} {lrel:18.3e} {pdiff:19.3e}{'' if good else '  <- over tolerance'}")
    print("torch equivalence:", "passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
