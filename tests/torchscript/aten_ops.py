# The TorchScript frontend's aten ops against PyTorch: each case is a small module traced (or
# scripted) and saved by a torch, evaluated by `sgc run` on the reference interpreter, and
# compared with what that torch computed on the same inputs. Cases cover the ops' arguments
# (dims, keywords, defaults), torch's type promotion, in-place writes through views, and scripted
# control flow (constant ifs, loops over module lists and ranges, functions with defaults).
# The torch running this script (Debian's 1.13 in CI) saves its cases into WORKDIR/live; the
# cases torch 2.11 saved on the GPU machine (--export there, including ops 1.13 lacks:
# scaled_dot_product_attention, rms_norm) are the fixture fixtures/aten-ops-2.11.tar.xz.
# An archive without traced inputs (torch 1.x, scripted modules) gets --input-type.
# Usage: /usr/bin/python3 aten_ops.py SGC WORKDIR      (the live cases and the fixture's)
#        python3 aten_ops.py --export OUTDIR            (write this torch's cases: a fixture)
import json, os, subprocess, sys, zipfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyutil"))
import st  # noqa: E402

g = torch.Generator().manual_seed(0)


def rnd(*s):
    return torch.randn(*s, generator=g)


def ints(hi, *s):
    return torch.randint(0, hi, s, generator=g)


def inplace_views(x, z):
    y = x.clone()
    y[:, 1:] = z          # copy_ into a slice
    y[:, 0] = 5.0          # fill_ into a select
    y.masked_fill_(y > 1.0, -1.0)
    y.add_(1.0)
    return torch.relu_(y)


def shifted(labels):  # T5's _shift_right
    s = labels.new_zeros(labels.shape)
    s[..., 1:] = labels[..., :-1].clone()
    s[..., 0] = 3
    s.masked_fill_(s == -100, 0)
    return s


CASES = {
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=0.5) - torch.sub(a, b, alpha=2), [rnd(3, 4), rnd(4)]),
    "rsub_mul_div": (lambda a, b: (1.5 - a) * b / (b.abs() + 1), [rnd(3, 4), rnd(3, 4)]),
    "int_promotion": (lambda i, f: i * 0.5 + f + (i // 3) + torch.remainder(i, 4) + i.float().div(7, rounding_mode="floor"),
                      [ints(20, 3, 4) - 10, rnd(3, 4)]),
    "zero_dim_promotion": (lambda i: i + torch.tensor(2.5) + torch.tensor(3), [ints(9, 5)]),
    "pow_where_clamp": (lambda a, b: torch.where(a > 0, a.pow(2), b).clamp(-0.5, 0.7) + a.clamp(min=0.1), [rnd(3, 4), rnd(3, 4)]),
    "unary": (lambda a: a.exp() + a.abs().log1p() + (a.abs() + 1).log() + (a.abs() + 0.1).sqrt() + (a.abs() + 0.1).rsqrt()
              + a.sin() + a.cos() + a.tanh() + a.sigmoid() + torch.erf(a) - a.neg(), [rnd(4, 5)]),
    "activations": (lambda a: F.relu(a) + F.silu(a) + F.gelu(a) + F.gelu(a, approximate="tanh") + F.hardsigmoid(a)
                    + F.hardswish(a) + F.hardtanh(a, -0.5, 0.5), [rnd(4, 5) * 4]),
    "compare_logic": (lambda a, b: ((a > b) & (a <= 0.5)) | (a == b) | (a != 0.1) & (a >= b) & (b < 1), [rnd(4, 4), rnd(4, 4)]),
    "reductions": (lambda a: a.mean(dim=1, keepdim=True).sum() + a.sum(0) + a.mean([0, 2]).unsqueeze(1), [rnd(3, 4, 5)]),
    "min_max": (lambda a: a.max(dim=1)[0] + a.min(1, keepdim=True)[1].float().squeeze(1) + a.max() + torch.maximum(a, a * 2).sum(1), [rnd(4, 6)]),
    "cumsum_softmax": (lambda a: a.cumsum(1) + F.softmax(a, dim=-1) + F.log_softmax(a, 0), [rnd(4, 6)]),
    "views": (lambda a: a.view(6, 4).t().reshape(2, 12).flatten().unsqueeze(0).expand(3, 24).permute(1, 0).transpose(0, 1)
              .reshape(3, 2, 12).squeeze(), [rnd(2, 3, 4)]),
    "repeat_expand_as": (lambda a, b: a.repeat(2, 3) + b.expand_as(a.repeat(2, 3)), [rnd(2, 3), rnd(1, 9)]),
    "slice_select_narrow": (lambda a: a[:, 1::2] * 2 + a[:, :3] + a.select(1, 2).unsqueeze(1) + a.narrow(1, 2, 3), [rnd(4, 6)]),
    "cat_stack": (lambda a, b: torch.cat([a, b, a], dim=1).sum(1) + torch.stack([a, b], 0).sum(0).sum(1), [rnd(3, 2), rnd(3, 2)]),
    "split_chunk_unbind": (lambda a: sum(a.split(2, 1)[i].sum() for i in range(3)) + a.split([1, 5], 1)[1].sum(1)
                           + a.chunk(2, 0)[1].sum(0).sum() + torch.stack(a.unbind(1), 0).sum(0), [rnd(4, 6)]),
    "pad": (lambda a: F.pad(a, (1, 2), value=0.5).sum(-1) + F.pad(a, (1, 1, 2, 0), mode="reflect").sum([-1, -2]).unsqueeze(-1)
            + F.pad(a, (2, 2), mode="replicate").mean(-1), [rnd(2, 3, 5)]),
    "index_gather": (lambda a, i, j: a[i].sum(0) + a[i, j].unsqueeze(1) + torch.gather(a, 1, j.unsqueeze(1).expand(4, 3)).sum(1).unsqueeze(1)
                     + a[:4].index_select(1, j[:2]).sum(1, keepdim=True), [rnd(5, 3), ints(5, 4), ints(3, 4)]),
    "embedding_triu": (lambda w, i: F.embedding(i, w).sum(1) + torch.triu(w[:3, :3], 1).sum() + torch.tril(w[:3, :3], -1).sum(), [rnd(10, 3), ints(10, 2, 4)]),
    "inplace_views": (inplace_views, [rnd(3, 4), rnd(3, 3)]),
    "shift_right": (lambda l: shifted(l), [torch.tensor([[5, -100, 7, 2], [-100, 1, 9, -100]])]),
    "creation": (lambda a: a + torch.arange(2, 8, 2) + torch.zeros(3) + torch.ones(3) * torch.full((3,), 2.5)
                 + a.new_zeros(3) + torch.zeros_like(a) + torch.full_like(a, 7) + torch.arange(3.0), [rnd(3)]),
    "to_type_as": (lambda a, i: a.to(torch.float64).sum() + i.type_as(a) + a.to(torch.int64).float(), [rnd(4) * 5, ints(5, 4)]),
    "linear_matmul": (lambda x, w, b, c: F.linear(x, w, b).sum(-1) + F.linear(x, w).matmul(c).squeeze(-1)
                      + torch.bmm(x, x.transpose(1, 2)).sum(-1), [rnd(2, 3, 4), rnd(5, 4), rnd(5), rnd(5, 1)]),
    "addmm_baddbmm": (lambda s, a, b, t: torch.addmm(s, a, b, beta=0.5, alpha=2).sum() + torch.baddbmm(t, t, t, alpha=0.5).sum(),
                      [rnd(3, 2), rnd(3, 4), rnd(4, 2), rnd(2, 3, 3)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, [4], w, b, 1e-3) + F.layer_norm(x, [3, 4]), [rnd(2, 3, 4), rnd(4), rnd(4)]),
    "batch_norm": (lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, training=False, eps=1e-3) + F.batch_norm(x, m.clone(), v.clone(), w, b, training=True),
                   [rnd(4, 3, 2, 2), rnd(3), rnd(3), rnd(3), rnd(3).abs() + 0.5]),
    "conv": (lambda x, w, b, dw: F.conv2d(x, w, b, stride=2, padding=1).sum() + F.conv2d(x, w, dilation=2, padding=(2, 1)).sum(1)
             .mean() + F.conv2d(x, dw, groups=4, padding=1), [rnd(2, 4, 7, 7), rnd(6, 4, 3, 3), rnd(6), rnd(4, 1, 3, 3)]),
    "pooling": (lambda x: F.max_pool2d(x, 3, 2, 1).sum() + F.max_pool2d(x, 2, ceil_mode=True).sum() + F.avg_pool2d(x, 2).sum()
                + F.avg_pool2d(x, 3, 2, 1, count_include_pad=False).sum() + F.adaptive_avg_pool2d(x, 1).sum()
                + F.adaptive_avg_pool2d(x[..., :6, :6], (3, 2)).sum(), [rnd(2, 3, 7, 7)]),
    "losses": (lambda x, t, lp: F.cross_entropy(x, t) + F.cross_entropy(x, t, ignore_index=2, reduction="sum")
               + F.nll_loss(lp, t) + F.cross_entropy(x, t, reduction="none").sum(), [rnd(6, 5), torch.tensor([0, 2, 4, 2, 1, 3]), F.log_softmax(rnd(6, 5), 1)]),
    "dropout_p0": (lambda x: F.dropout(x, 0.0, True) + F.dropout(x, 0.3, False), [rnd(3, 3)]),
}


class Scripted(torch.nn.Module):
    """Control flow that scripting keeps: ifs on attributes and sizes, loops over a ModuleList
    and a range building a list, functional calls with default arguments."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.drop = torch.nn.Dropout(0.0)
        self.norm = torch.nn.LayerNorm(4)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])
        self.use_norm = True

    def forward(self, x, y):
        h = self.fc(x)
        if self.training:
            h = self.drop(h)
        for layer in self.layers:
            h = F.relu(layer(h)) + h
        if self.use_norm:
            h = self.norm(h)
        if x.size(0) > 100:
            h = h * 0.0
        outs = []
        for i in range(2):
            outs.append(h * float(i + 1))
        h = torch.cat(outs, 1)[:, :4]
        return F.cross_entropy(h, y)


SCRIPTED = {"scripted_control_flow": (Scripted, [rnd(3, 4), torch.tensor([0, 1, 2])])}

# Ops that torch 1.13 lacks, saved by torch 2.x only.
if hasattr(F, "scaled_dot_product_attention") and hasattr(F, "rms_norm"):
    CASES.update({
        "sdpa_causal_scale": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3), [rnd(2, 3, 5, 4), rnd(2, 3, 5, 4), rnd(2, 3, 5, 4)]),
        "sdpa_mask_gqa": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True),
                          [rnd(2, 4, 5, 4), rnd(2, 2, 6, 4), rnd(2, 2, 6, 4), torch.rand(5, 6, generator=g) > 0.3]),
        "sdpa_float_mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), [rnd(1, 2, 3, 4), rnd(1, 2, 3, 4), rnd(1, 2, 3, 4), rnd(3, 3)]),
        "rms_norm": (lambda x, w: F.rms_norm(x, [4], w) + F.rms_norm(x, [3, 4], eps=1e-3), [rnd(2, 3, 4), rnd(4)]),
        "native_layer_norm": (lambda x, w, b: torch.native_layer_norm(x, [4], w, b, 1e-5)[0] + torch.native_layer_norm(x, [4], w, b, 1e-5)[2],
                              [rnd(2, 3, 4), rnd(4), rnd(4)]),
    })


class Wrap(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *a):
        return self.fn(*a)


def sgc_type(t):
    names = {torch.float32: "f32", torch.int64: "i64", torch.float64: "f64", torch.bool: "bool"}
    return f"{names[t.dtype]}[{','.join(map(str, t.shape))}]"


def export(out):
    """Saves each case this torch has: NAME.pt, NAME.in.safetensors, NAME.expected.safetensors; cases.json."""
    os.makedirs(out, exist_ok=True)
    manifest = {}
    for name, (fn, inputs) in list(CASES.items()) + list(SCRIPTED.items()):
        scripted = name in SCRIPTED
        with torch.no_grad():
            module = torch.jit.script(fn()) if scripted else torch.jit.trace(Wrap(fn), tuple(x.clone() for x in inputs), check_trace=False)
            if not scripted:
                expected = fn(*[x.clone() for x in inputs])
            else:
                torch.manual_seed(0)
                expected = module(*[x.clone() for x in inputs])
        torch.jit.save(module, os.path.join(out, name + ".pt"))
        code = module.code
        args = [a.split(":")[0].strip() for a in code[code.index("(") + 1:code.index(")")].replace("\n", "").split(",")][1:]
        st.write(os.path.join(out, name + ".in.safetensors"), dict(zip(args, inputs)))
        st.write(os.path.join(out, name + ".expected.safetensors"), {"output": expected})
        manifest[name] = {"input_type": ",".join(f"{a}={sgc_type(x)}" for a, x in zip(args, inputs))}
    json.dump({"torch": torch.__version__, "cases": manifest}, open(os.path.join(out, "cases.json"), "w"), indent=1, sort_keys=True)


def check(sgc, folder):
    """Runs every case of `folder` through sgc; returns the count that failed."""
    info = json.load(open(os.path.join(folder, "cases.json")))
    failed = 0
    for name, case in info["cases"].items():
        pt, ins, outs = (os.path.join(folder, f"{name}.{e}") for e in ("pt", "in.safetensors", "out.safetensors"))
        cmd = [sgc, "run", pt, "--inputs", ins, "-o", outs]
        traced = any(n.endswith("/traced_inputs.pkl") for n in zipfile.ZipFile(pt).namelist())
        if not traced:
            cmd += ["--input-type", case["input_type"]]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"{name:22s} FAILED  {p.stderr.strip()}")
            failed += 1
            continue
        got = st.read(outs)["output"]
        want = st.read(os.path.join(folder, name + ".expected.safetensors"))["output"].astype(np.float64)
        err = float(np.max(np.abs(got.astype(np.float64) - want) / (np.abs(want) + 1e-3))) if want.size else 0.0
        ok = got.shape == want.shape and err <= 1e-4
        failed += not ok
        print(f"{name:22s} {'ok' if ok else 'FAILED'}  shape {list(got.shape)}  rel err {err:.1e}{'' if traced else '  (--input-type)'}", flush=True)
    print(f"{len(info['cases'])} cases saved by torch {info['torch']}: {len(info['cases']) - failed} match, {failed} failed", flush=True)
    return failed


def main():
    if sys.argv[1] == "--export":
        return export(sys.argv[2])
    sgc, work = sys.argv[1], sys.argv[2]
    export(os.path.join(work, "live"))
    failed = check(sgc, os.path.join(work, "live"))
    fixture = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "aten-ops-2.11.tar.xz")
    if os.path.exists(fixture):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyutil"))
        import fixtures
        fixtures.unpack(fixture, os.path.join(work, "torch-2.11"))
        failed += check(sgc, os.path.join(work, "torch-2.11"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
