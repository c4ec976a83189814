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
import gpu_train  # PyTorch's step as the benchmark runs it; loading a library as it does

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
    return gpu_train.torch_training_step(name, mode)[0]


def sgc_step(name, so):
    """The library's step on the benchmark's batch (weights as gpu_train.py's: PyTorch's seed-0 init)."""
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


def host_wall_ms(step, runs=10):
    """The median host wall time of a step, synchronized (as gpu_train.py times the sgc side)."""
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e3)
    return sorted(walls)[runs // 2]


STEP = "step"  # record_function around the host's step; the profiler shows it on the GPU's timeline too


def on_gpu(e):
    """Whether profile event `e` is the GPU's work (a kernel, memset or copy): not the span of STEP
    nor of another record_function range shown on the GPU's timeline (torch.optim's
    "Optimizer.step#AdamW.step", which session 37's profiles counted as a kernel of 1.5-5.3 ms)."""
    return e.device_type == torch.autograd.DeviceType.CUDA and e.name != STEP and not getattr(e, "is_user_annotation", False)


def gpu_work(prof):
    """The GPU's kernels, memsets and copies of a profile in start order: (start us, end us, name) and
    the idle time before each (none of the earlier ones running)."""
    work = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events() if on_gpu(e))
    rows, end = [], work[0][0] if work else 0
    for a, b, n in work:
        rows.append((a, b, n, max(0.0, a - end)))
        end = max(end, b)
    return rows


def print_host_calls(prof):
    """The host's calls of more than 5 us beside the GPU's first and last work, from the profile's
    start; and where the host's step (record_function "step") began and ended against them."""
    evs = sorted(prof.events(), key=lambda e: e.time_range.start)
    if not evs:
        return
    gpu = [e for e in evs if on_gpu(e)]
    host = next((e for e in evs if e.name == STEP and e.device_type != torch.autograd.DeviceType.CUDA), None)
    if host and gpu:
        first, last = gpu[0].time_range.start, max(e.time_range.end for e in gpu)
        print(f"  host step {host.time_range.elapsed_us() / 1e3:.3f} ms: {(first - host.time_range.start) / 1e3:.3f} ms before the GPU's "
              f"first work, {(last - first) / 1e3:.3f} ms from it to the GPU's last, {(host.time_range.end - last) / 1e3:.3f} ms after that")
    for e in [e for e in evs if e.device_type != torch.autograd.DeviceType.CUDA and e.time_range.elapsed_us() > 5] + gpu[:3] + gpu[-3:]:
        where = "GPU" if e.device_type == torch.autograd.DeviceType.CUDA else "host"
        print(f"  {where:4} {(e.time_range.start - evs[0].time_range.start) / 1e3:9.3f} ms +{e.time_range.elapsed_us() / 1e3:8.3f} ms  {e.name[:80]}")


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "llama"
    mode = sys.argv[2] if len(sys.argv) > 2 else "compile"
    step = sgc_step(name, sys.argv[3]) if mode == "sgc" else torch_step(name, mode)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    wall_ms = host_wall_ms(step)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with torch.profiler.record_function(STEP):  # the host's step, from the call to its return
            step()
        torch.cuda.synchronize()
    work = gpu_work(prof)
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, f"timeline_{name}_{mode}.tsv"), "w") as f:
        f.write("start_us\tus\tidle_before_us\tname\n")
        for a, b, n, idle in work:
            f.write(f"{a - work[0][0]:.1f}\t{b - a:.1f}\t{idle:.1f}\t{n}\n")
    kernels = {}
    for a, b, n, _ in work:
        k = kernels.setdefault(n, [0, 0.0])
        k[0] += 1
        k[1] += (b - a) / 1e3
    fams = {}
    for k, (n, ms) in kernels.items():
        fams[family(k)] = fams.get(family(k), 0.0) + ms
    total, idle = sum(fams.values()), sum(w[3] for w in work) / 1e3
    span = (max(w[1] for w in work) - work[0][0]) / 1e3 if work else 0.0
    # written before printing: a reader that stops early (| head) must not cost the file
    json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "kernels_ms": total, "span_ms": span, "idle_ms": idle,
               "host_wall_ms": wall_ms, "families_ms": fams, "kernels": {k: {"launches": n, "ms": ms} for k, (n, ms) in kernels.items()}},
              open(os.path.join(out, f"torch_profile_{name}_{mode}.json"), "w"), indent=1)
    if mode == "sgc":
        print_host_calls(prof)
    print(f"{name} {mode} on {torch.cuda.get_device_name()}: kernels {total:.2f} ms in {len(work)} launches; "
          f"first start to last end {span:.2f} ms, of which idle {idle:.2f} ms; host wall time a step {wall_ms:.2f} ms")
    for f, ms in sorted(fams.items(), key=lambda kv: -kv[1]):
        print(f"  {f:32} {ms:8.2f} ms")
    for k, (n, ms) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:40]:
        print(f"  {ms:8.3f} ms {n:4d}x {family(k):10.10} {k[:110]}")


if __name__ == "__main__":
    main()
