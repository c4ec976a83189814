# The half of the GPU benchmark that runs on the device (bench/gpu_build.sh
# made the .so files): for each model, PyTorch writes its initial weights
# (seed 0) to a safetensors file; the compiled step loads them and trains on
# the same batch; then PyTorch eager and torch.compile train from the same
# weights (AdamW, bf16 autocast), in the same run. A model's other builds
# beside it (gpt_rc.so: compiled with --recompute cheap; gpt_whole.so: the
# classifier whole) are timed too. Prints
# ms/step (median of 20 after warm-up steps of 2 s at least, 3 at least), peak memory, the first losses
# of each side, the card's SM clock and power draw while its steps ran
# (GpuMonitor), the ratios, and sgc's profile (SGC_PROFILE, no graph) by kernel family with its
# hottest launches' TB/s or TFLOP/s against the H200's; writes the results as JSON to $OUT/gpu_train.json
# (after each model: a run cut short keeps the models it finished).
# Exits 1 where sgc's first losses do not follow eager's (losses_differ).
# Usage: python3 bench/gpu_train.py bench/out [mlp,gpt]
import glob, json, os, subprocess, sys, time
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import gpu_models as gm
import sgc  # the Python package over the C ABI
sys.path.insert(0, os.path.join(HERE, "..", "tests", "pyutil"))
import st  # the project's safetensors reader and writer

STEPS, WARM, LOSSES = 20, 3, 3
WARM_S = 2.0  # and at least this many seconds of warm-up steps on every side (warm_up)
# Other builds of a model, timed beside NAME.so: NAME_rc.so, and so on.
VARIANTS = [("rc", "--recompute cheap"), ("whole", "--classifier-chunk-mb 0"), ("c512", "--classifier-chunk-mb 512"),
            ("c256", "--classifier-chunk-mb 256")]


# ---- the sgc side, in its own process (its own CUDA context and memory) ----
def shared_nccl_id(lib, rank, id_file, wait_s=120):
    """Rank 0 makes the NCCL id and writes it to `id_file`; the other ranks wait for that file."""
    if rank == 0:
        nid = lib.nccl_unique_id()
        if id_file:
            open(id_file + ".tmp", "wb").write(nid)
            os.rename(id_file + ".tmp", id_file)
        return nid
    deadline = time.time() + wait_s
    while not os.path.exists(id_file):
        if time.time() > deadline:
            sys.exit(f"rank {rank}: no NCCL id in {id_file} after {wait_s} s")
        time.sleep(0.01)
    return open(id_file, "rb").read(128)


class GpuMonitor:
    """nvidia-smi's samples, every 100 ms while a side's steps run, of the SM clock, the power draw,
    the temperature and the active clock-event reasons (a bit mask: 0x4 the power cap, 0x20/0x40
    thermal slowdown): a card at its power limit runs back-to-back steps at a lower clock than one
    step after a pause. summary() is {} where nvidia-smi is missing or answers otherwise."""
    QUERY = "clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"

    def __enter__(self):
        try:
            self.proc = subprocess.Popen(["nvidia-smi", "-i", "0", f"--query-gpu={self.QUERY}", "--format=csv,noheader,nounits", "-lms", "100"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
        return self

    def __exit__(self, *exc):
        self.samples = []
        if self.proc:
            self.proc.terminate()
            for line in self.proc.communicate()[0].splitlines():
                f = [x.strip() for x in line.split(",")]
                try:
                    self.samples.append((float(f[0]), float(f[1]), float(f[2]), f[3]))
                except (ValueError, IndexError):
                    pass

    def summary(self):
        if not self.samples:
            return {}
        median = lambda i: sorted(x[i] for x in self.samples)[len(self.samples) // 2]
        return {"sm_MHz": median(0), "power_W": median(1), "max_temp_C": max(x[2] for x in self.samples),
                "clock_reasons": sorted({x[3] for x in self.samples}), "samples": len(self.samples)}


def sgc_side(so, weights, name, comm="none", rank=0, world=1, id_file=None, kept=LOSSES):
    """comm: none, or nccl: the library's collectives through NCCL, as rank `rank` of `world` on cuda:`rank`
    (rank 0 writes the NCCL id to `id_file`, the others wait for it), on its 1/world of a batch world times the
    benchmark's. Prints one JSON line: ms/step, the first `kept` losses (the mean over the ranks), memory."""
    rank, world = int(rank), int(world)
    torch.cuda.set_device(rank)
    free0, total = torch.cuda.mem_get_info()
    lib = sgc.load(so)
    comm_args = {}
    if comm == "nccl":
        comm_args = dict(communicator="nccl", rank=rank, world_size=world, nccl_id=shared_nccl_id(lib, rank, id_file))
    s = lib.session(device=f"cuda:{rank}", timeout_ms=120000, **comm_args)
    free1, _ = torch.cuda.mem_get_info()
    # The checkpoint holds the state_dict: keep the parameters this library has (one of two tied names).
    names = s.parameter_names()
    full = st.read(weights)
    missing = [n for n in names if n not in full]
    if missing:
        sys.exit(f"{weights}: no {missing}")
    # Every parameter PyTorch trains (tied ones once) must be one of the library's: an export that
    # merged equal initializers (torch.onnx.export in eval mode) would train them as one.
    untrained = sorted({n for n, _ in gm.make(name).named_parameters()} - set(names))
    if untrained:
        sys.exit(f"{so}: PyTorch trains {len(untrained)} parameters the library does not have ({', '.join(untrained[:4])}, ...): tied at export?")
    mine = weights.replace(".safetensors", f".sgc{rank}.safetensors")
    st.write(mine, {n: full[n] for n in names})
    s.load(mine)
    # The batch (host tensors) is given once: the steps after the first keep it.
    inputs = dict(zip(s.inputs(), (t.contiguous() for t in gm.rank_batch(name, rank, world))))
    losses, times = [], []

    def step():
        t0 = time.perf_counter()
        losses.append(s.step(**(inputs if not losses else {})))
        times.append((time.perf_counter() - t0) * 1e3)
    with GpuMonitor() as gpu:
        if os.environ.get("SGC_PROFILE"):  # the library's profile: its fourth step's launches
            for _ in range(4):
                step()
            t = times[3:]
        else:
            warm_up(step, lambda: None)  # each step returns its loss: synchronized
            for _ in range(STEPS):
                step()
            t = sorted(times[-STEPS:])
    print(json.dumps({"ms": t[len(t) // 2], "first_step_ms": times[0], "losses": losses[:kept], "peak_GiB": (free0 - free1) / 2**30, "clocks": gpu.summary(),
                      "plan_GiB": s.memory_plan_bytes() / 2**30, "device": s.description()}), flush=True)
    s.close()  # writes the profile


# ---- the PyTorch side, as ../shared/bench/torch_peers.py measures it ----
def warm_up(step, synchronize):
    """Runs `step` WARM times, and more until WARM_S seconds of steps have run, each one
    synchronized: the timed steps of every side then start from a card whose clock has settled
    under that side's load. (Session 30, an H200, with 3 warm-up steps: sgc's timed steps, the first
    GPU work after its session opened, ran at SM 1620-1710 MHz, torch.compile's at 1680-1845.)"""
    t0, n = time.perf_counter(), 0
    while n < WARM or time.perf_counter() - t0 < WARM_S:
        step()
        synchronize()
        n += 1
    return n


def time_steps(step):
    """The median GPU time of `step` in ms over STEPS runs after warm_up (CUDA events)."""
    warm_up(step, torch.cuda.synchronize)
    ts = []
    for _ in range(STEPS):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); step(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


def torch_training_step(name, mode, init=None):
    """PyTorch's training step of model `name` (eager or compile) on the benchmark's batch: AdamW
    (fused), bf16 autocast; from `init` (a state_dict) or the seed-0 initialization. Returns
    (step, model, optimizer); step() returns the loss."""
    model = gm.make(name).cuda()
    if init is not None:
        model.load_state_dict(init)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x, y = gm.batch(name, "cuda")
    fwd = torch.compile(model) if mode == "compile" else model

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        return loss
    return step, model, opt


def dynamo_counts():
    """torch.compile's graphs compiled and graph breaks so far in this process ({} without dynamo):
    a count that grows during the timed steps means they recompiled."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    return {"graphs": counters["stats"]["unique_graphs"], "graph_breaks": sum(counters["graph_break"].values())}


def torch_side(name, mode, init):
    step, model, opt = torch_training_step(name, mode, init)
    t0 = time.time()
    losses = [step().item() for _ in range(LOSSES)]
    first_s = time.time() - t0
    compiled = dynamo_counts()
    torch.cuda.reset_peak_memory_stats()
    with GpuMonitor() as gpu:
        ms = time_steps(step)
    r = {"ms": ms, "peak_GiB": torch.cuda.max_memory_allocated() / 2**30, "losses": losses, "first_steps_s": first_s, "clocks": gpu.summary()}
    if mode == "compile":  # this process's counts (eager compiles nothing), after the first steps and after the timed ones
        r["dynamo"] = {"after_first_steps": compiled, "after_timing": dynamo_counts()}
    del model, opt, step
    torch.cuda.empty_cache()
    return r


FAMILIES = [("GEMM (cuBLASLt, with epilogues)", lambda ops, kind: kind == "cublaslt"),
            ("optimizer", lambda ops, kind: "AdamUpdate" in ops or "SgdUpdate" in ops),
            ("loss", lambda ops, kind: any(o in ops for o in ("CrossEntropy", "SceLoss", "NllLoss", "NegativeLogLikelihood"))),
            ("fused attention", lambda ops, kind: "FusedAttention" in ops),
            ("softmax (attention)", lambda ops, kind: "Softmax" in ops),
            ("layernorm", lambda ops, kind: "LayerNorm" in ops),
            ("reductions", lambda ops, kind: "Reduce" in ops),
            ("data movement", lambda ops, kind: any(o in ops for o in ("Transpose", "Gather", "Concat", "Slice", "Split", "Expand"))),
            ("elementwise", lambda ops, kind: True)]


# The limits the hot kernels are set against: the figures for the H200 (HBM and bf16
# tensor cores as kernels reach them).
LIMIT_TBS, LIMIT_TFLOPS = 4.3, 780.0
HOT = 12  # kernels listed by time


def profile_summary(path):
    """Milliseconds per step by kernel family, the gaps between launches, and the HOT launches
    (by their ops, summed over their launches) with their rates: their tensors' bytes a second
    (each tensor counted once a launch) and, for products, their flops a second."""
    fam, step, n, comm, hot = {}, 0.0, 0, 0.0, {}
    for line in open(path).read().splitlines()[1:]:
        parts = line.split("\t")
        _, ops, kind, ms = parts[:4]
        if len(parts) > 5 and parts[5] == "communication":  # overlaps the compute stream: not in the step's sum
            comm += float(ms)
            continue
        if kind == "step":
            step = float(ms)
            continue
        name = next(f for f, match in FAMILIES if match(ops, kind))
        fam[name] = fam.get(name, 0.0) + float(ms)
        n += 1
        h = hot.setdefault(ops, {"ms": 0.0, "launches": 0, "bytes": 0, "flops": 0.0, "family": name})
        h["ms"] += float(ms)
        h["launches"] += 1
        if len(parts) > 7:  # libraries since session 30 write their tensors' bytes and products' flops
            h["bytes"] += int(parts[6])
            h["flops"] += float(parts[7])
    fam["launch gaps (step - kernels)"] = step - sum(fam.values())
    if comm:
        fam["(communication stream, concurrent)"] = comm
    top = sorted(hot.items(), key=lambda kv: -kv[1]["ms"])[:HOT]
    for _, h in top:
        seconds = h["ms"] / 1e3
        h["TB_per_s"] = h["bytes"] / seconds / 1e12 if seconds > 0 else 0.0
        h["TFLOP_per_s"] = h["flops"] / seconds / 1e12 if seconds > 0 else 0.0
    return {"step_ms": step, "launches": n, "families_ms": fam, "hot": [dict(h, ops=ops) for ops, h in top]}


def print_hot(hot):
    """The hot launches' rates against LIMIT_TBS and LIMIT_TFLOPS."""
    print(f"  hottest launches (rates against {LIMIT_TBS} TB/s and {LIMIT_TFLOPS:.0f} TFLOP/s; bytes: their tensors', once each):")
    for h in hot:
        rate = f"{h['TFLOP_per_s']:6.0f} TFLOP/s ({h['TFLOP_per_s'] / LIMIT_TFLOPS:4.0%})" if h["flops"] else \
            f"{h['TB_per_s']:6.2f} TB/s ({h['TB_per_s'] / LIMIT_TBS:4.0%})" if h["bytes"] else f"{'(no sizes)':>22}"
        print(f"    {h['ms']:8.3f} ms {h['launches']:4d}x  {rate}  {h['ops'][:70]}")


def losses_differ(sgc, eager):
    """Why sgc's first losses do not follow PyTorch eager's from the same weights and data, or None:
    the first within 0.1% (bf16), and each later step's drop from it within half of eager's (the
    MLP's drops, 1e-5 of its loss, differ by up to a third between the two; a step that skips part
    of its update drops far less)."""
    if "losses" not in sgc or "losses" not in eager:
        return None
    s, e = sgc["losses"], eager["losses"]
    if abs(s[0] - e[0]) > 1e-3 * abs(e[0]):
        return f"first loss {s[0]:.6g}, eager's {e[0]:.6g}"
    for k in range(1, min(len(s), len(e))):
        ratio = (s[0] - s[k]) / (e[0] - e[k]) if e[0] != e[k] else 1.0
        if not 0.5 <= ratio <= 1.5:
            return f"step {k} drops the loss {ratio:.2f}x as far as eager does"
    return None


def unpacked(so):
    """`so`, from `so`.xz if only that came (bench/gpu_build.sh packs each library: a device call carries 64 MiB)."""
    if not os.path.exists(so) and os.path.exists(so + ".xz"):
        import lzma
        with lzma.open(so + ".xz") as src, open(so + ".tmp", "wb") as dst:
            dst.write(src.read())
        os.chmod(so + ".tmp", 0o755)
        os.rename(so + ".tmp", so)
    return so


def library_hash(so):
    """The library's SHA-256 (hex): a stale build shows as a hash that differs from today's."""
    import hashlib
    with open(so, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def library_env():
    """The environment for the sgc side: the device image may have cuBLASLt and NCCL only in PyTorch's wheels."""
    env = dict(os.environ)
    for var, pattern, system in (("SGC_CUBLASLT", "libcublasLt.so.*", "/usr/local/cuda/lib64/libcublasLt.so.13"),
                                 ("SGC_NCCL", "libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2")):
        found = sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "**", pattern), recursive=True))
        if var not in env and found and not os.path.exists(system):
            env[var] = os.path.abspath(found[0])
    return env


def main():
    if sys.argv[1] == "--sgc":  # the child process
        sgc_side(*sys.argv[2:6])
        return
    out_dir, models = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "mlp,gpt").split(",")
    env = library_env()
    failed = False
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    for name in models:
        init = {k: v.clone() for k, v in gm.make(name).state_dict().items()}
        wfile = os.path.join(out_dir, name + "_init.safetensors")
        st.write(wfile, init)
        so = unpacked(os.path.join(out_dir, name + ".so"))
        r = {"library_sha256": library_hash(so)}  # which build ran: compare with bench/gpu_build.sh's list
        proc = subprocess.run([sys.executable, __file__, "--sgc", so, wfile, name], capture_output=True, text=True, env=env)
        lines = proc.stdout.splitlines()
        r["sgc"] = json.loads(lines[0]) if lines else {"error": proc.stderr[-2000:]}
        if proc.returncode:
            r["sgc"]["exit"] = f"status {proc.returncode}: {proc.stderr[-300:]}"

        prof = os.path.join(os.environ.get("OUT", "."), name + "_profile.tsv")
        proc = subprocess.run([sys.executable, __file__, "--sgc", so, wfile, name], capture_output=True,
                              text=True, env=dict(env, SGC_PROFILE=prof, SGC_PROFILE_FROM="1"))  # step 0 pays first calls (cuBLASLt heuristics)
        if proc.returncode == 0 and os.path.exists(prof):
            r["sgc_profile"] = profile_summary(prof)
        for variant, flag in VARIANTS:
            path = os.path.join(out_dir, f"{name}_{variant}.so")
            if os.path.exists(path) or os.path.exists(path + ".xz"):
                proc = subprocess.run([sys.executable, __file__, "--sgc", unpacked(path), wfile, name], capture_output=True, text=True, env=env)
                lines = proc.stdout.splitlines()
                r["sgc " + flag] = json.loads(lines[0]) if lines else {"error": proc.stderr[-2000:]}
        for mode in ("eager", "compile"):
            r[mode] = torch_side(name, mode, init)
        res[name] = r
        print(f"\n{name}: {r['sgc'].get('device', r['sgc'].get('error'))}; library sha256 {r['library_sha256'][:12]}")
        print(f"{'':26} {'ms/step':>9} {'peak GiB':>9}  first losses")
        sgcs = [k for k in r if k.startswith("sgc") and k != "sgc_profile"]
        for side in sgcs + ["eager", "compile"]:
            v = r[side]
            if "ms" in v:
                c = v.get("clocks") or {}
                clocks = f"  SM {c['sm_MHz']:.0f} MHz, {c['power_W']:.0f} W, reasons {','.join(c['clock_reasons'])}" if c else ""
                print(f"{side:26} {v['ms']:9.2f} {v['peak_GiB']:9.2f}  {' '.join(f'{l:.5f}' for l in v['losses'])}{clocks}")
            else:
                print(f"{side:26} failed: {v.get('error', '')[-300:]}")
        if d := r["compile"].get("dynamo"):
            a, b = d["after_first_steps"], d["after_timing"]
            if b:
                print(f"torch.compile in this process so far: {b['graphs']} graphs, {b['graph_breaks']} graph breaks"
                      + ("; it COMPILED AGAIN during the timed steps" if a != b else ""))
        for side in sgcs:
            if why := losses_differ(r[side], r["eager"]):
                print(f"LOSSES DIFFER, {side}: {why}")
                failed = True
            if "ms" in r[side]:
                print(f"ratios, {side}: /eager {r[side]['ms'] / r['eager']['ms']:.2f}x, /compile {r[side]['ms'] / r['compile']['ms']:.2f}x time; "
                      f"memory /compile {r[side]['peak_GiB'] / r['compile']['peak_GiB']:.2f}x")
        if "sgc_profile" in r:
            p = r["sgc_profile"]
            print(f"sgc profile (events around each of {p['launches']} launches, no CUDA graph): step {p['step_ms']:.2f} ms")
            for f, ms in sorted(p["families_ms"].items(), key=lambda kv: -kv[1]):
                print(f"  {f:34} {ms:9.2f} ms", flush=True)
            print_hot(p["hot"])
        # After each model, so that a run cut short by a time limit keeps the models it finished.
        out = os.environ.get("OUT", ".")
        json.dump(res, open(os.path.join(out, "gpu_train.json.tmp"), "w"), indent=1)
        os.replace(os.path.join(out, "gpu_train.json.tmp"), os.path.join(out, "gpu_train.json"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
