# Where PyTorch's own training step spends its GPU time, kernel family by family, to set beside the
# sgc profile that bench/gpu_train.py prints: the same model, weights, batch and step (AdamW fused,
# bf16 autocast) as gpu_train.py's torch side, one step profiled with torch.profiler after warm-up.
# With mode sgc, a compiled library's step (CUDA graph replays) is profiled the same way, which
# gives its kernels' own durations and the idle time between them (the library's own profile,
# SGC_PROFILE, times each launch with events and without the graph).
# Prints each family's ms per step and the heaviest kernels; writes $OUT/torch_profile_MODEL_MODE.json.
# Usage (on the device): python3 bench/torch_profile.py llama [compile|eager|sgc LIB.so[.xz]]
import json, os, sys, time
import torch
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_models as gm

# Kernel name patterns per family, first match wins (cuBLAS/cuDNN/flash/inductor's Triton names).
FAMILIES = [("GEMM", ("gemm", "nvjet", "sm90_xmma", "cutlass", "cublas")),
            ("attention", ("flash", "fmha", "attention", "cudnn", "sdpa")),
            ("optimizer", ("adam", "multi_tensor", "foreach")),
            ("loss", ("nll", "cross_entropy", "log_softmax", "softmax")),
            ("norm", ("norm", "rsqrt", "mean")),
            ("copies", ("copy", "memcpy", "memset", "fill", "cat", "clone")),
            ("elementwise (Triton and ATen)", ("",))]


def family(name):
    low = name.lower()
    return next(f for f, keys in FAMILIES if any(k in low for k in keys))


def torch_step(name, mode):
    model = gm.make(name).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x, y = gm.batch(name, "cuda")
    fwd = torch.compile(model) if mode == "compile" else model

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    return step


def sgc_step(name, so):
    """The library's step on the benchmark's batch (weights as gpu_train.py's: PyTorch's seed-0 init)."""
    import gpu_train  # its library loading: sgc's Python package, cuBLASLt from PyTorch's wheels
    os.environ.update(gpu_train.library_env())
    s = gpu_train.sgc.load(gpu_train.unpacked(so.removesuffix(".xz"))).session(device="cuda:0")
    init = gm.make(name).state_dict()
    weights = os.path.join(os.environ.get("OUT", "."), name + "_profile_init.safetensors")
    gpu_train.st.write(weights, {n: init[n] for n in s.parameter_names()})
    s.load(weights)
    os.remove(weights)
    inputs = dict(zip(s.inputs(), (t.contiguous() for t in gm.batch(name))))
    first = [True]

    def step():
        s.step(**(inputs if first[0] else {}))
        first[0] = False
    return step


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "llama"
    mode = sys.argv[2] if len(sys.argv) > 2 else "compile"
    step = sgc_step(name, sys.argv[3]) if mode == "sgc" else torch_step(name, mode)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    walls = []
    for _ in range(10):  # host wall time a step, as gpu_train.py times the sgc side
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e3)
    wall_ms = sorted(walls)[5]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels, spans = {}, []
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            k = kernels.setdefault(ev.name, [0, 0.0])
            k[0] += 1
            k[1] += ev.device_time_total / 1e3
            spans.append((ev.time_range.start, ev.time_range.end))
    spans.sort()
    timeline = sorted(((ev.time_range.start, ev.time_range.end, ev.name) for ev in prof.events()
                       if ev.device_type == torch.autograd.DeviceType.CUDA))
    with open(os.path.join(os.environ.get("OUT", "."), f"timeline_{name}_{mode}.tsv"), "w") as f:
        f.write("start_us\tus\tidle_before_us\tname\n")  # the GPU's work in order, and the idle time before each
        for i, (a, b, n) in enumerate(timeline):
            f.write(f"{a - timeline[0][0]:.1f}\t{b - a:.1f}\t{max(0.0, a - max(e for _, e, _ in timeline[:i])) if i else 0.0:.1f}\t{n}\n")
    if mode == "sgc":  # where the host's time goes around the GPU's: its API calls, the GPU's first and last work
        evs = sorted(prof.events(), key=lambda e: e.time_range.start)
        t0 = evs[0].time_range.start if evs else 0
        gpu = [e for e in evs if e.device_type == torch.autograd.DeviceType.CUDA]
        for e in [e for e in evs if e.device_type != torch.autograd.DeviceType.CUDA and e.time_range.elapsed_us() > 5] + gpu[:3] + gpu[-3:]:
            where = "GPU" if e.device_type == torch.autograd.DeviceType.CUDA else "host"
            print(f"  {where:4} {(e.time_range.start - t0) / 1e3:9.3f} ms +{e.time_range.elapsed_us() / 1e3:8.3f} ms  {e.name[:80]}")
    idle, end = 0.0, spans[0][0] if spans else 0
    for a, b in spans:  # time between the first kernel's start and the last one's end with none running
        idle += max(0, a - end)
        end = max(end, b)
    fams = {}
    for k, (n, ms) in kernels.items():
        fams[family(k)] = fams.get(family(k), 0.0) + ms
    total = sum(fams.values())
    wall = (end - spans[0][0]) / 1e3 if spans else 0.0
    print(f"{name} {mode} on {torch.cuda.get_device_name()}: kernels {total:.2f} ms in {sum(n for n, _ in kernels.values())} launches; "
          f"first start to last end {wall:.2f} ms, of which idle {idle / 1e3:.2f} ms; host wall time a step {wall_ms:.2f} ms")
    for f, ms in sorted(fams.items(), key=lambda kv: -kv[1]):
        print(f"  {f:32} {ms:8.2f} ms")
    top = sorted(kernels.items(), key=lambda kv: -kv[1][1])[:40]
    for k, (n, ms) in top:
        print(f"  {ms:8.3f} ms {n:4d}x {family(k):10.10} {k[:110]}")
    out = os.path.join(os.environ.get("OUT", "."), f"torch_profile_{name}_{mode}.json")
    json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "kernels_ms": total, "span_ms": wall, "idle_ms": idle / 1e3, "host_wall_ms": wall_ms, "families_ms": fams,
               "kernels": {k: {"launches": n, "ms": ms} for k, (n, ms) in kernels.items()}}, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
