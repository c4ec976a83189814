# The cost of data parallelism's machinery on one GPU (the device side;
# bench/gpu_build.sh made the .so files). GPT-2 small as gpt.so (no data
# parallelism) and as gpt_dp.so (--data-parallel allreduce), the latter both
# without a communicator (its collectives skipped: only the memory plan
# differs) and as one NCCL rank (the all-reduces, their stream and events,
# inside the CUDA graph). Same weights, same batch; ms/step is the median of
# 20 after 3 warm-up steps (bench/gpu_train.py's sgc side).
#
# Then an estimate of the communication a step on N GPUs would expose: the
# per-launch GPU times of the NCCL run (SGC_PROFILE), the buckets' bytes and
# places (from the program the .so carries), and a ring all-reduce moving
# 2(N-1)/N of each bucket at an assumed bus bandwidth, one bucket after
# another on the communication stream, each starting when the compute stream
# reaches it and holding up the first launch that reads it. And, from a
# profiled step of GPT-2 small under ZeRO-1 at world size 1 (gpt_z1.so, whose
# reduce-scatters and all-gathers copy), how much of the communication
# stream's time ran beside compute kernels, with a Chrome trace of that step.
# Usage: python3 bench/gpu_dp.py bench/out
import json, os, subprocess, sys
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_models as gm
import gpu_train as gt
sys.path.insert(0, os.path.join(HERE, "..", "tests", "pyutil"))
import st

BUS_GBPS = (400, 100)  # assumed all-reduce bus bandwidths: NVLink-class, and a slower network
WORLDS = (2, 8)


def program(so):
    """The program description a .so carries (runtime/Program.h)."""
    raw = open(so, "rb").read()
    return json.JSONDecoder().raw_decode(raw[raw.index(b'{"abi"'):].decode("latin-1"))[0]


def exposed_ms(prog, launch_ms, world, bus_gbps):
    """Extra milliseconds a step would take on `world` GPUs: the step replayed with each bucket's
    all-reduce on a serial communication stream and each bucket's first reader waiting for it."""
    tensors = prog["tensors"]
    buckets = []  # (launch index, seconds, tensor ids)
    for i, l in enumerate(prog["launches"]):
        c = l.get("collective")
        if c:
            size = sum(tensors[t]["bytes"] for t in c["tensors"])
            buckets.append((i, size * 2 * (world - 1) / world / (bus_gbps * 1e9) * 1e3, set(c["tensors"])))
    def touched(l):
        ids = set(l["args"]) | set(l.get("epilogue", {}).get("args", []))
        ids |= {l["gemm"][k] for k in ("a", "b", "y")} if "gemm" in l else set()
        for c in l.get("gpu", []):
            ids |= set(c["args"])
        return ids
    reads = [touched(l) for l in prog["launches"]]
    t = comm_free = 0.0
    done = {}  # bucket launch -> when its all-reduce ends
    pending = []
    for i, ms in enumerate(launch_ms):
        for b in list(pending):
            if reads[i] & b[2]:
                t = max(t, done[b[0]])
                pending.remove(b)
        for b in buckets:
            if b[0] == i:
                comm_free = max(comm_free, t) + b[1]
                done[i] = comm_free
                pending.append(b)
        t += ms
    for b in pending:
        t = max(t, done[b[0]])
    return t - sum(launch_ms), [b[1] for b in buckets], [sum(tensors[x]["bytes"] for x in b[2]) for b in buckets]


def stream_overlap(prof):
    """An SGC_PROFILE file's last profiled step: each launch's (start ms, end ms, stream, ops), the communication
    stream's milliseconds, and how many of them some compute kernel ran beside."""
    rows = [l.split("\t") for l in open(prof).read().splitlines()[1:] if not l.startswith("step")]
    spans = [(float(r[4]), float(r[4]) + float(r[3]), r[5], r[1]) for r in rows if float(r[3]) > 0]
    compute = sorted((a, b) for a, b, s, _ in spans if s == "compute")
    comm = [(a, b) for a, b, s, _ in spans if s == "communication"]
    covered = 0.0
    for a, b in comm:  # the part of [a, b) during which some compute kernel ran
        t = a
        for c0, c1 in compute:
            if c1 <= t or c0 >= b:
                continue
            covered += min(c1, b) - max(c0, t)
            t = max(t, min(c1, b))
    return spans, sum(b - a for a, b in comm), covered


def write_trace(spans, path):
    """The spans as a Chrome trace (chrome://tracing, Perfetto): compute on thread 1, communication on 2."""
    trace = [{"name": n, "ph": "X", "ts": a * 1e3, "dur": (b - a) * 1e3, "pid": 0, "tid": 1 if s == "compute" else 2}
             for a, b, s, n in spans]
    json.dump({"traceEvents": trace}, open(path, "w"))


def overlap(so, wfile, env, res):
    """Where the collectives ran against the compute stream in one profiled step of `so` (no graph):
    how much of their time compute kernels ran too; a Chrome trace of the step ($OUT/gpt_z1_trace.json)."""
    prof = os.path.join(os.environ.get("OUT", "."), "gpt_z1_profile.tsv")
    subprocess.run([sys.executable, os.path.join(HERE, "gpu_train.py"), "--sgc", so, wfile, "gpt", "nccl"], capture_output=True,
                   env=dict(env, SGC_PROFILE=prof))
    if not os.path.exists(prof):
        print("ZeRO-1 profile: none written")
        return
    spans, total, covered = stream_overlap(prof)
    res["zero1_comm_ms"], res["zero1_comm_overlapped_ms"] = total, covered
    print(f"ZeRO-1, NCCL world 1, one profiled step: {sum(s == 'communication' for _, _, s, _ in spans)} collectives on the "
          f"communication stream, {total:.3f} ms, {covered:.3f} ms of it ({100 * covered / max(total, 1e-9):.0f}%) while compute kernels ran")
    write_trace(spans, os.path.join(os.environ.get("OUT", "."), "gpt_z1_trace.json"))


def run_side(so, wfile, comm, env):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "gpu_train.py"), "--sgc", so, wfile, "gpt", comm], capture_output=True,
                          text=True, env=env)
    lines = proc.stdout.splitlines()
    return json.loads(lines[0]) if proc.returncode == 0 and lines else {"error": proc.stderr[-1500:]}


def main():
    out_dir = sys.argv[1]
    env = gt.library_env()
    wfile = os.path.join(out_dir, "gpt_init.safetensors")
    st.write(wfile, {k: v.clone() for k, v in gm.make("gpt").state_dict().items()})
    gpt, dp, z1 = (gt.unpacked(os.path.join(out_dir, f)) for f in ("gpt.so", "gpt_dp.so", "gpt_z1.so"))
    rows = [("gpt.so (no data parallelism)", gpt, "none"), ("gpt_dp.so, no communicator", dp, "none"), ("gpt_dp.so, NCCL world 1", dp, "nccl"),
            ("gpt_z1.so (ZeRO-1), NCCL world 1", z1, "nccl")]
    res = {"gpu": torch.cuda.get_device_name()}
    print(f"{'GPT-2 small, bf16, batch 16 x 1024':34} {'ms/step':>9} {'peak GiB':>9}  first losses")
    for label, so, comm in rows:
        if not os.path.exists(so):
            print(f"{label:34} (not carried here)")
            continue
        r = res[label] = run_side(so, wfile, comm, env)
        if "ms" not in r:
            print(f"{label:34} FAILED: {r['error']}")
            continue
        print(f"{label:34} {r['ms']:9.2f} {r['peak_GiB']:9.2f}  {' '.join(f'{l:.5f}' for l in r['losses'])}")
    none, nccl = res.get(rows[1][0], {}), res.get(rows[2][0], {})
    if "ms" in none and "ms" in nccl:
        print(f"cost of the machinery at world size 1: {nccl['ms'] / none['ms']:.3f}x ({nccl['ms'] - none['ms']:+.2f} ms/step)")
    if os.path.exists(z1):
        overlap(z1, wfile, env, res)
    prof = os.path.join(os.environ.get("OUT", "."), "gpt_dp_profile.tsv")
    subprocess.run([sys.executable, os.path.join(HERE, "gpu_train.py"), "--sgc", dp, wfile, "gpt", "nccl"], capture_output=True,
                   env=dict(env, SGC_PROFILE=prof))
    if os.path.exists(prof):
        rows_ = [l.split("\t") for l in open(prof).read().splitlines()[1:] if not l.startswith("step")]
        launch_ms = [0.0 if len(r) > 5 and r[5] == "communication" else float(r[3]) for r in rows_]  # the compute stream's
        prog = program(dp)
        print(f"estimated exposed communication per step (profile: {sum(launch_ms):.1f} ms of kernels):")
        for world in WORLDS:
            for bus in BUS_GBPS:
                extra, times, sizes = exposed_ms(prog, launch_ms, world, bus)
                res[f"exposed_ms_{world}gpus_{bus}GBps"] = extra
                print(f"  {world} GPUs at {bus} GB/s bus bandwidth: {extra:6.2f} ms exposed of {sum(times):6.2f} ms of all-reduce "
                      f"({len(sizes)} collectives, {sum(sizes) / 2**20:.0f} MiB; the largest {max(sizes) / 2**20:.0f} MiB)")
    json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "gpu_dp.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
