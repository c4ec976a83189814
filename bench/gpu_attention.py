# The half of the attention benchmark that runs on the device
# (bench/gpu_attention_build.sh made the .so files): causal self-attention,
# forward and backward, at the shapes of bench/gpu_models.py's ATTN (or,
# named, unmasked at ATTN_FULL's). attn128g's keys and values have a quarter
# of the query heads (KV_HEADS); PyTorch's SDPA runs it as after Hugging
# Face's repeat_kv, the keys and values expanded to every head.
# sgc's step runs once with SGC_PROFILE (CUDA events around each launch, no
# graph) and its FusedAttention kernels are summed; PyTorch's SDPA (bf16) is
# timed in the same run with the cuDNN and the flash backends, forward and
# backward (median of 20 after 2 s of warm-up runs). Rates count a causal
# problem's matrix products: 2 forward and 5 backward of 2 B H T^2 D / 2 flops.
# Checks that the kernels compute attention and its gradient: the first loss
# of each side, and the gradient of the three parameters (which sum dq, dk and
# dv over every row) read back from sgc's first SGD step, (p0 - p1) / lr,
# against PyTorch's (bf16 autocast) by relative norm, in CHECKS fresh processes:
# fails when any is over 2e-2.
# JSON goes to $OUT/gpu_attention.json.
# Usage: python3 bench/gpu_attention.py bench/out/attention [attn64,attn128,attn128g,attn64full,attn128full]
import json, os, subprocess, sys
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_models as gm
import gpu_train as gt
st = gt.st


def shape(name):
    return {**gm.ATTN, **gm.ATTN_FULL}[name]


def flops(name):
    B, H, T, D = shape(name)
    return 7 * 2 * B * H * T * T * D / (2 if name in gm.ATTN else 1)


def sgc_kernels(so, wfile, name, env):
    """ms per step of each attention launch (in launch order) and the first loss."""
    prof = os.path.join(os.environ.get("OUT", "."), name + "_profile.tsv")
    proc = subprocess.run([sys.executable, gt.__file__, "--sgc", so, wfile, name], capture_output=True, text=True,
                          env=dict(env, SGC_PROFILE=prof))
    if proc.returncode:
        return {"error": proc.stderr[-1000:]}
    loss = json.loads(proc.stdout.splitlines()[0])["losses"][0]
    kernels = []
    for line in open(prof).read().splitlines()[1:]:
        _, ops, kind, ms = line.split("\t")[:4]
        if ops.startswith("FusedAttention"):
            kernels.append((ops, float(ms)))
    return {"kernels": kernels, "ms": sum(ms for _, ms in kernels), "loss": loss}


CHECKS = 3  # one-step gradient checks per build
LR = 1e3  # bench/gpu_attention_build.sh's: large, so that the step (about 1e-4 x lr) is read far above float32 rounding


def sgc_gradients(so, wfile, name):
    """The child process: one sgc training step; prints the parameters' gradients as JSON."""
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import sgc
    with sgc.load(so).session(device="cuda:0", timeout_ms=120000) as s:
        s.load(wfile)
        s.step(**dict(zip(s.inputs(), gm.batch(name))))
        after = wfile.replace(".safetensors", ".step1.safetensors")
        s.save(after)
    p0, p1 = st.read(wfile), st.read(after)
    print(json.dumps({k: ((torch.tensor(p0[k], dtype=torch.float64) - torch.tensor(p1[k], dtype=torch.float64)) / LR).tolist() for k in sorted(p0)}))


def gradient_check(so, wfile, name, env):
    """Relative norm difference of sgc's parameter gradients from PyTorch's (bf16 autocast, SDPA's default backend)."""
    proc = subprocess.run([sys.executable, __file__, "--grads", so, wfile, name], capture_output=True, text=True, env=env)
    if proc.returncode:
        return {"error": proc.stderr[-1000:]}
    got = {k: torch.tensor(v, dtype=torch.float64) for k, v in json.loads(proc.stdout.splitlines()[-1]).items()}
    model = gm.make(name).cuda()
    x, y = gm.batch(name, "cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        model(x, y).backward()
    out = {}
    for k, p in model.named_parameters():
        ref = p.grad.double().cpu()
        out[k] = float((got[k] - ref).norm() / ref.norm())
    return out


def torch_sdpa(name, backend):
    """fwd+bwd ms of PyTorch's SDPA on bf16 q, k, v with one backend, and the model's first loss through it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    B, H, T, D = shape(name)
    g = torch.Generator(device="cuda").manual_seed(2)
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(3))
    dy = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g)
    be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]
    with sdpa_kernel(be):
        def step():
            F.scaled_dot_product_attention(q, k, v, is_causal=name in gm.ATTN).backward(dy)
        ms = gt.time_steps(step)
        model = gm.make(name).cuda()
        x, y = gm.batch(name, "cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y).item()
    return {"ms": ms, "loss": loss}


def main():
    if sys.argv[1] == "--grads":  # the child process
        sgc_gradients(*sys.argv[2:5])
        return
    out_dir = sys.argv[1]
    names = (sys.argv[2] if len(sys.argv) > 2 else ",".join(gm.ATTN)).split(",")
    env = gt.library_env()
    failed = False
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    for name in names:
        wfile = os.path.join(out_dir, name + "_init.safetensors")
        st.write(wfile, {k: v.clone() for k, v in gm.make(name).state_dict().items()})
        so = gt.unpacked(os.path.join(out_dir, name + ".so"))
        r = {"sgc": sgc_kernels(so, wfile, name, env)}
        # Fresh sessions' first steps: the arena's clearing once raced the uploads (2026-12-04,
        # fixed in runtime/Cuda.cpp); the worst run counts.
        checks = [gradient_check(so, wfile, name, env) for _ in range(CHECKS)]
        r["sgc"]["gradient_checks"] = checks
        r["sgc"]["gradient_vs_torch"] = next((c for c in checks if "error" in c), None) or {k: max(c[k] for c in checks) for k in checks[0]}
        for backend in ("cudnn", "flash"):
            try:
                r[backend] = torch_sdpa(name, backend)
            except RuntimeError as e:
                r[backend] = {"error": str(e)[:300]}
        res[name] = r
        print(f"\n{name} {shape(name)} (B, H, T, D), {'causal' if name in gm.ATTN else 'unmasked'}, bf16, forward + backward")
        for side, v in r.items():
            if "ms" not in v:
                print(f"  {side:6} failed: {v.get('error', '')}")
                continue
            ratio = f"  {v['ms'] / r['cudnn']['ms']:.2f}x cudnn" if "ms" in r.get("cudnn", {}) else ""
            print(f"  {side:6} {v['ms']:8.3f} ms {flops(name) / v['ms'] / 1e9:7.1f} TFLOP/s  first loss {v['loss']:.5f}{ratio}")
        for ops, ms in r["sgc"].get("kernels", []):
            print(f"    {ops:20} {ms:8.3f} ms")
        g = r["sgc"]["gradient_vs_torch"]
        print("  gradients, sgc vs PyTorch (relative norm):", g)
        failed = failed or "error" in g or max(g.values()) > 2e-2
    json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "gpu_attention.json"), "w"), indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
