# CPU benchmark: the compiled .so's training step against PyTorch eager on the
# CPU (Debian's python3-torch, one thread over a generic BLAS), in the same
# run, for an MLP (4 x Linear 512, GELU, batch 256, MSE, AdamW) and a small
# GPT (2 layers, 128 wide, 4 heads, sequence 64, batch 8, vocabulary 512,
# AdamW); and the rate of one 512^3 matrix product (a forward-only step of a
# one-layer model) against the machine's f32 FMA peak.
# Usage: /usr/bin/python3 bench/cpu_train.py [path/to/sgc]
import json, math, os, re, statistics, subprocess, sys, tempfile, time
import torch
import torch.nn as nn
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "training"))
sys.path.insert(0, os.path.join(here, "..", "python"))
import sgc  # noqa: E402  the package over the C ABI (python/sgc)
from torch_equivalence import GPT  # noqa: E402

SGC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "build", "driver", "sgc")
WARM, ITERS = 2, 7


class MLP(nn.Module):
    def __init__(self, d=512, layers=4):
        super().__init__()
        self.ls = nn.ModuleList([nn.Linear(d, d) for _ in range(layers)])

    def forward(self, x, y):
        for l in self.ls[:-1]:
            x = F.gelu(l(x))
        out = self.ls[-1](x)
        return ((out - y) ** 2).mean()


class OneMatMul(nn.Module):
    def __init__(self, n=512):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n, n) / math.sqrt(n))

    def forward(self, x, y):
        return (x @ self.w).sum() + 0 * y.sum()


def median_ms(fn):
    for _ in range(WARM):
        fn()
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def compile_model(model, args, work, name):
    path = os.path.join(work, name + ".onnx")
    torch.onnx.export(model, args, path, input_names=["x", "y"], output_names=["loss"], opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    so = os.path.join(work, name + ".so")
    t0 = time.perf_counter()
    proc = subprocess.run([SGC, "compile", path, "-o", so, "--target", "cpu", "--optimizer", "adamw", "--lr", "1e-4", "--stats"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    kernels = re.search(r"launches per step: (\d+)", proc.stderr).group(1)
    return so, time.perf_counter() - t0, kernels


def bench_train(name, model, x, y, work):
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def torch_step():
        loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    t_torch = median_ms(torch_step)
    so, compile_s, launches = compile_model(model, (x, y), work, name)
    row = {"model": name, "torch_eager_ms": t_torch, "compile_s": compile_s, "launches_per_step": int(launches)}
    for threads in (1, 2):
        s = sgc.load(so).session(threads=threads)
        s.step(x=x, y=y)  # the inputs, which the steps after keep
        row[f"sgc_{threads}t_ms"] = median_ms(s.step)
    return row


def fma_peak_gflops(cores=2):
    mhz = max(float(m) for m in re.findall(r"cpu MHz\s*:\s*([\d.]+)", open("/proc/cpuinfo").read()))
    return cores * mhz * 1e-3 * 32  # AVX2: two 8-wide FMA units = 32 flop/cycle/core


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as work:
        torch.manual_seed(0)
        rows = [bench_train("mlp_4x512_b256", MLP(), torch.randn(256, 512), torch.randn(256, 512), work)]
        gpt = GPT(vocab=512, T=64, d=128, layers=2, heads=4)
        rows.append(bench_train("gpt_2x128_t64_b8", gpt, torch.randint(0, 512, (8, 64)), torch.randint(0, 512, (8, 64)), work))
        n = 512
        so, _, _ = compile_model(OneMatMul(n), (torch.randn(n, n), torch.randn(1)), work, "gemm")
        x = torch.randn(n, n)
        gemm = {}
        for threads in (1, 2):
            s = sgc.load(so).session(threads=threads)
            s.eval_step(x=x, y=torch.randn(1))
            gemm[f"sgc_{threads}t_GFLOPs"] = 2 * n**3 / (median_ms(s.eval_step) * 1e-3) / 1e9
        gemm["torch_1t_GFLOPs"] = 2 * n**3 / (median_ms(lambda: x @ x) * 1e-3) / 1e9
        gemm["fma_peak_2cores_GFLOPs"] = fma_peak_gflops()
    print(f"{'model':20} {'torch eager':>12} {'sgc 1 thread':>13} {'sgc 2 threads':>14} {'ratio (2t)':>11} {'launches':>9}")
    for r in rows:
        print(f"{r['model']:20} {r['torch_eager_ms']:10.1f}ms {r['sgc_1t_ms']:11.1f}ms {r['sgc_2t_ms']:12.1f}ms "
              f"{r['torch_eager_ms'] / r['sgc_2t_ms']:10.2f}x {r['launches_per_step']:9d}")
    print(f"GEMM 512^3: sgc {gemm['sgc_1t_GFLOPs']:.1f} GFLOP/s (1 thread), {gemm['sgc_2t_GFLOPs']:.1f} (2 threads); "
          f"torch {gemm['torch_1t_GFLOPs']:.1f} (1 thread); f32 FMA peak {gemm['fma_peak_2cores_GFLOPs']:.0f} on 2 cores")
    json.dump({"train": rows, "gemm": gemm}, open(os.path.join(os.environ.get("OUT", "."), "cpu_train.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
