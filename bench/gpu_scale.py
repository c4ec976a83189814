# Data-parallel scaling on the GPUs of one machine (the device side;
# bench/gpu_build.sh made the .so files): GPT-2 small (bf16, AdamW), 16 x 1024
# tokens per GPU, on 1 GPU and on all of them, sgc against PyTorch in the
# same run:
#   sgc      gpt_dp.so without a communicator on 1 GPU; gpt_dp.so
#            (--data-parallel allreduce) and gpt_z1r<N>.so (zero1 --ranks N)
#            as N NCCL ranks
#   PyTorch  torch.compile on 1 GPU; DDP + torch.compile and FSDP2
#            (bf16 parameters, fp32 reductions) + torch.compile on N GPUs
# Each rank is its own process on its own GPU and trains on its contiguous
# 1/N of a batch N times the benchmark's; ms/step is rank 0's median of 20
# steps after 3 warm-up steps. Also: the per-step losses of every N-GPU run
# against PyTorch eager on one GPU on the whole global batch; NCCL's own
# all-reduce bus bandwidth on this machine (torch.distributed, fp32, as
# nccl-tests counts it); and from a profiled step of each sgc N-GPU run
# (SGC_PROFILE, no CUDA graph) the communication stream's time, how much of
# it ran beside compute, the bus bandwidth its all-reduces reached, and a
# Chrome trace ($OUT/gpt_<mode>_<N>gpu_trace.json).
# Writes $OUT/gpu_scale.json.
# Usage: python3 bench/gpu_scale.py bench/out [busbw,ref,sgc,torch]
import datetime, json, os, subprocess, sys, time
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_models as gm
import gpu_train as gt
import gpu_dp
sys.path.insert(0, os.path.join(HERE, "..", "tests", "pyutil"))
import st

KEPT = 6  # losses compared per run
OUT = os.environ.get("OUT", ".")


# ---- children: one process per rank ----
def torch_rank(mode, rank, world, port):
    """mode: busbw; ref (eager, one GPU, the whole global batch: losses only); compile (one GPU); ddp; fsdp2."""
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    distributed = mode in ("busbw", "ddp", "fsdp2")
    if distributed:
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120), device_id=torch.device("cuda", rank))
    if mode == "busbw":
        print(json.dumps(bus_bandwidth(dist, world)), flush=True)
        dist.destroy_process_group()
        return
    model = gm.make("gpt").cuda()
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, device_ids=[rank])
    elif mode == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in model.blocks:
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    fwd = model if mode == "ref" else torch.compile(model)
    x, y = gm.batch("gpt", "cuda", gm.GPT_B * world) if mode == "ref" else gm.rank_batch("gpt", rank, world, "cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        return loss.detach()

    losses = []
    for _ in range(KEPT):
        loss = step()
        if distributed:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        losses.append(loss.item())
    r = {"losses": losses}
    if mode != "ref":
        torch.cuda.reset_peak_memory_stats()
        r.update(ms=gt.time_steps(step), peak_GiB=torch.cuda.max_memory_allocated() / 2**30)
    print(json.dumps(r), flush=True)
    if distributed:
        dist.destroy_process_group()


def bus_bandwidth(dist, world):
    """NCCL's all-reduce bus bandwidth in GB/s for fp32 buffers of 1 MiB to 1 GiB: 2(N-1)/N of the bytes per second."""
    out = {}
    for mib in (1, 8, 64, 147, 512, 1024):
        buf = torch.ones(mib * 2**20 // 4, device="cuda")
        for _ in range(5):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        dist.barrier()
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        iters = 20
        s.record()
        for _ in range(iters):
            dist.all_reduce(buf)
        e.record(); torch.cuda.synchronize()
        sec = s.elapsed_time(e) / iters * 1e-3
        out[f"{mib} MiB"] = {"ms": sec * 1e3, "busbw_GBps": mib * 2**20 * 2 * (world - 1) / world / sec / 1e9}
        del buf
    return out


# ---- the parent ----
def launch(argvs, env, timeout=400):
    """Runs one child per rank at once; rank 0's JSON line, or the error of the first rank that failed."""
    procs = [subprocess.Popen([sys.executable, __file__] + a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for a in argvs]
    outs = []
    deadline = time.time() + timeout
    for p in procs:
        try:
            outs.append(p.communicate(timeout=max(1, deadline - time.time())) + (p.returncode,))
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append(p.communicate() + ("timed out",))
    for out, err, rc in outs:
        if rc != 0 or not out.strip():
            return {"error": f"status {rc}: {err[-1500:]}"}
    return json.loads(outs[0][0].splitlines()[0])


def sgc_runs(out_dir, world, env, res):
    wfile = os.path.join(out_dir, "gpt_init.safetensors")
    st.write(wfile, {k: v.clone() for k, v in gm.make("gpt").state_dict().items()})
    dp, z1 = (gt.unpacked(os.path.join(out_dir, f)) for f in ("gpt_dp.so", f"gpt_z1r{world}.so"))
    res["sgc 1 GPU"] = launch([["--sgc", dp, wfile, "none", "0", "1", "-"]], env)
    for mode, so in (("allreduce", dp), ("zero1", z1)):
        if not os.path.exists(so):
            res[f"sgc {mode} {world} GPUs"] = {"error": f"{so}: not here"}
            continue
        for profiled in (False, True):
            id_file = os.path.join(OUT, f"nccl.{mode}.{int(profiled)}.id")
            argvs = [["--sgc", so, wfile, "nccl", str(r), str(world), id_file] for r in range(world)]
            if not profiled:
                res[f"sgc {mode} {world} GPUs"] = launch(argvs, env)
                continue
            prof = os.path.join(OUT, f"gpt_{mode}_{world}gpu_profile.tsv")
            launch(argvs, dict(env, SGC_PROFILE=prof))  # rank 0's; rank r's gets the suffix .r
            if os.path.exists(prof):
                res[f"sgc {mode} {world} GPUs"]["profile"] = comm_profile(prof, gpu_dp.program(so), world,
                                                                          os.path.join(OUT, f"gpt_{mode}_{world}gpu_trace.json"))


def comm_profile(prof, program, world, trace):
    """The communication stream in one profiled step: its ms, the part beside compute, and the bus bandwidth its
    collectives of 1 MiB or more reached, all together and the largest alone (as nccl-tests counts: 2(N-1)/N of an
    all-reduce's bytes, (N-1)/N of the whole buffer of a reduce-scatter or all-gather, per second)."""
    spans, total, covered = gpu_dp.stream_overlap(prof)
    gpu_dp.write_trace(spans, trace)
    moved = ms = 0.0
    largest = (0, 0.0, 0.0)  # bytes, bus bytes, ms
    for line in open(prof).read().splitlines()[1:]:
        r = line.split("\t")
        if r[0] == "step" or r[5] != "communication":
            continue
        c = program["launches"][int(r[0])]["collective"]
        size = max(program["tensors"][t]["bytes"] for t in c["tensors"])  # the whole buffer
        if size < 2**20:
            continue
        bus = size * (world - 1) / world * (2 if c["op"] == "allreduce" else 1)
        moved += bus
        ms += float(r[3])
        largest = max(largest, (size, bus, float(r[3])))
    busbw = lambda size, ms: size / (ms * 1e-3) / 1e9 if ms else None
    return {"comm_ms": total, "comm_beside_compute_ms": covered, "collectives_ms": ms, "busbw_GBps": busbw(moved, ms),
            "largest_MiB": largest[0] / 2**20, "largest_ms": largest[2], "largest_busbw_GBps": busbw(largest[1], largest[2])}


def torch_runs(world, env, res):
    res["torch.compile 1 GPU"] = launch([["--torch", "compile", "0", "1", "0"]], env)
    for mode, label in (("ddp", "DDP + torch.compile"), ("fsdp2", "FSDP2 + torch.compile")):
        port = str(29500 + (os.getpid() + len(label)) % 1000)
        res[f"{label} {world} GPUs"] = launch([["--torch", mode, str(r), str(world), port] for r in range(world)], env)


def report(world, res):
    ref = res.get("reference", {}).get("losses")
    print(f"\nGPT-2 small, bf16, AdamW, 16 x 1024 tokens per GPU ({res['gpu']}, torch {res['torch']})")
    print(f"{'':34} {'ms/step':>8} {'peak GiB':>9} {'scaling':>8} {'loss vs 1 GPU':>14}  first losses (mean over ranks)")
    base = {"sgc": res.get("sgc 1 GPU", {}).get("ms"), "torch": res.get("torch.compile 1 GPU", {}).get("ms")}
    for key in ("sgc 1 GPU", f"sgc allreduce {world} GPUs", f"sgc zero1 {world} GPUs", "torch.compile 1 GPU",
                f"DDP + torch.compile {world} GPUs", f"FSDP2 + torch.compile {world} GPUs"):
        r = res.get(key)
        if r is None:
            continue
        if "ms" not in r:
            print(f"{key:34} FAILED: {r.get('error', '')[-600:]}")
            continue
        b = base["sgc" if key.startswith("sgc") else "torch"]
        eff = f"{100 * b / r['ms']:7.1f}%" if b and "GPUs" in key else ""
        diff = ""
        if ref and "GPUs" in key:
            r["worst_loss_rel_diff"] = max(abs(a - c) / abs(c) for a, c in zip(r["losses"], ref))
            diff = f"{r['worst_loss_rel_diff']:.1e}"
        print(f"{key:34} {r['ms']:8.2f} {r['peak_GiB']:9.2f} {eff:>8} {diff:>14}  {' '.join(f'{l:.3f}' for l in r['losses'])}")
    if ref:
        print(f"{'reference: eager, 1 GPU, batch ' + str(gm.GPT_B * world):34} {'':8} {'':9} {'':8} {'':14}  {' '.join(f'{l:.3f}' for l in ref)}")
    g = lambda k: res.get(k, {}).get("ms")
    for a, b in ((f"sgc allreduce {world} GPUs", f"DDP + torch.compile {world} GPUs"),
                 (f"sgc zero1 {world} GPUs", f"FSDP2 + torch.compile {world} GPUs"),
                 (f"sgc allreduce {world} GPUs", f"FSDP2 + torch.compile {world} GPUs")):
        if g(a) and g(b):
            print(f"{a} / {b}: {g(a) / g(b):.2f}x")
    for mode in ("allreduce", "zero1"):
        r = res.get(f"sgc {mode} {world} GPUs", {})
        if "ms" in r and g("sgc 1 GPU"):
            line = f"sgc {mode}: exposed communication {r['ms'] - g('sgc 1 GPU'):+.2f} ms/step (step time over 1 GPU's)"
            p = r.get("profile")
            if p:
                line += (f"; profiled step: communication stream {p['comm_ms']:.2f} ms, {p['comm_beside_compute_ms']:.2f} ms of it "
                         f"beside compute")
                if p["busbw_GBps"]:
                    line += (f"; its collectives of 1 MiB or more {p['collectives_ms']:.2f} ms at {p['busbw_GBps']:.0f} GB/s "
                             f"bus bandwidth, the largest ({p['largest_MiB']:.0f} MiB) {p['largest_ms']:.2f} ms at "
                             f"{p['largest_busbw_GBps']:.0f} GB/s")
            print(line)
    if "busbw" in res and "error" not in res["busbw"]:
        print("NCCL all-reduce bus bandwidth (torch.distributed, fp32): " +
              ", ".join(f"{k} {v['busbw_GBps']:.0f} GB/s" for k, v in res["busbw"].items()))


def main():
    if sys.argv[1] == "--sgc":  # a rank of the sgc side
        so, wfile, comm, rank, world, id_file = sys.argv[2:8]
        if rank != "0" and "SGC_PROFILE" in os.environ:  # each rank its own profile
            os.environ["SGC_PROFILE"] += "." + rank
        gt.sgc_side(so, wfile, "gpt", comm, int(rank), int(world), id_file, KEPT)
        return
    if sys.argv[1] == "--torch":
        torch_rank(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return
    out_dir = sys.argv[1]
    parts = (sys.argv[2] if len(sys.argv) > 2 else "busbw,ref,sgc,torch").split(",")
    world = torch.cuda.device_count()
    if world < 2:
        sys.exit("gpu_scale.py: needs two GPUs or more; this machine has " + str(world))
    env = dict(gt.library_env(), NCCL_NVLS_ENABLE="0")  # NVLink multicast stays off
    path = os.path.join(OUT, "gpu_scale.json")
    res = json.load(open(path)) if os.path.exists(path) else {}
    res.update(gpu=torch.cuda.get_device_name(), torch=torch.__version__, world=world)
    for part in parts:
        if part == "busbw":
            res["busbw"] = launch([["--torch", "busbw", str(r), str(world), str(29400 + os.getpid() % 100)] for r in range(world)], env)
        elif part == "ref":
            res["reference"] = launch([["--torch", "ref", "0", str(world), "0"]], env)
        elif part == "sgc":
            sgc_runs(out_dir, world, env, res)
        elif part == "torch":
            torch_runs(world, env, res)
        json.dump(res, open(path, "w"), indent=1)
    report(world, res)


if __name__ == "__main__":
    main()
