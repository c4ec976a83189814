# Data-parallel training on the CPU through MPI (OpenMPI's mpirun), against
# one process: the MLP and the small GPT of torch_equivalence.py, exported
# twice from the same weights (the whole batch, and half of it), compiled
# without and with --data-parallel (allreduce, and zero1 over 2 ranks). Two
# ranks, each on its half of every batch, must give the per-step losses and
# final parameters of one rank on the whole batch (within 1e-5 relative: per
# step for the losses, in norm per tensor for the parameters and, for
# allreduce, the optimizer state). ZeRO-1 resumed from its checkpoint (the
# sharded state gathered) must continue exactly. Then the failures: ranks running
# different libraries are refused with both hashes named, and a rank that
# exits mid-run makes the other fail within its --comm-timeout instead of
# hanging. Usage: /usr/bin/python3 data_parallel.py SGC WORKDIR SGC_INCLUDE_DIR
import json, os, shutil, subprocess, sys, time
import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "training"))
sys.path.insert(0, os.path.join(here, "..", "pyutil"))
import st  # noqa: E402
import torch_equivalence as te  # noqa: E402

STEPS, RTOL = 6, 1e-5
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
          "--mca", "btl_vader_single_copy_mechanism", "none"]
OPTIMIZERS = {
    "adamw-clip": ["--optimizer", "adamw", "--lr", "1e-2", "--clip-grad-norm", "0.5"],
    "sgd-nesterov": ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--nesterov"],
}


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def export(name, cls, work):
    torch.manual_seed(0)
    model = cls()
    model.train()
    xs, ys = te.data_for(name, torch.Generator().manual_seed(1))
    half = xs.shape[1] // 2
    paths = {}
    for which, (x, y) in (("whole", (xs[0], ys[0])), ("half", (xs[0][:half], ys[0][:half]))):
        paths[which] = os.path.join(work, f"{name}_{which}.onnx")
        torch.onnx.export(model, (x, y), paths[which], input_names=["x", "y"], output_names=["loss"], opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    data = os.path.join(work, f"{name}_data.safetensors")
    st.write(data, {"x": xs, "y": ys})
    return paths, data


def losses(proc):
    return [json.loads(line)["loss"] for line in proc.stdout.splitlines()]


def relative(a, b):
    """||a - b|| / ||b|| over a tensor: Adam turns the f32 rounding of near-cancelling gradient sums
    (summed in another order over two ranks) into single-element differences of up to 2e-5 of the
    tensor's largest value, but they stay a few millionths of the tensor as a whole."""
    return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30))


MODES = {"allreduce": ["--data-parallel", "allreduce", "--bucket-mb", "0.002"],
         "zero1": ["--data-parallel", "zero1", "--ranks", "2", "--bucket-mb", "0.002"]}


BUILT = set()


def compare(sgc, work, name, paths, data, opt, flags, mode):
    """One rank on the whole batch against two on halves; returns (loss rel, param rel, buckets)."""
    one, two = os.path.join(work, f"{name}_{opt}_one.so"), os.path.join(work, f"{name}_{opt}_{mode}.so")
    for so, onnx, extra in ((one, paths["whole"], []), (two, paths["half"], MODES[mode])):
        if so in BUILT:  # the one-rank library serves both modes (built in this run: never a stale one)
            continue
        BUILT.add(so)
        proc = run([sgc, "compile", onnx, "-o", so, "--target", "cpu"] + flags + extra)
        if proc.returncode:
            sys.exit(f"FAIL: sgc compile {os.path.basename(so)}: {proc.stderr}")
    ir = run([sgc, "compile", paths["half"], "--emit=ir", "--train"] + MODES[mode] + flags).stdout
    buckets = ir.count("= AllReduce(") - 1 if mode == "allreduce" else ir.count("= ReduceScatter(")
    ref = run([sgc, "train", one, "--data", data, "--steps", str(STEPS), "--threads", "1", "--save", one + ".ckpt"])
    got = run(MPIRUN + ["-np", "2", sgc, "train", two, "--data", data, "--steps", str(STEPS), "--threads", "1", "--save", two + ".ckpt"])
    if ref.returncode or got.returncode:
        sys.exit(f"FAIL: {name} {opt}: one rank: {ref.stderr}\ntwo ranks: {got.stdout}{got.stderr}")
    a, b = np.array(losses(got)), np.array(losses(ref))
    if len(a) != STEPS or len(b) != STEPS:
        sys.exit(f"FAIL: {name} {opt}: expected {STEPS} losses from rank 0 alone, got {len(a)} (and {len(b)} from one rank)")
    loss_rel = float(np.max(np.abs(a - b) / np.abs(b)))
    p1, p2 = st.read(one + ".ckpt"), st.read(two + ".ckpt")
    # ZeRO-1's optimizer state is per bucket (flat, gathered from the ranks): compare the parameters.
    params = [k for k in p1 if k != "sgc.step" and not k.endswith((".exp_avg", ".exp_avg_sq", ".momentum_buffer"))]
    keys = [k for k in p1 if k != "sgc.step"] if mode == "allreduce" else params
    if any(k not in p2 for k in keys):
        sys.exit(f"FAIL: {name} {opt} {mode}: the checkpoints hold different tensors: {sorted(set(p1) ^ set(p2))}")
    param_rel = max(relative(p2[k].astype(np.float64), p1[k].astype(np.float64)) for k in keys)
    return loss_rel, param_rel, buckets


def check_zero1_resume(sgc, work, data):
    """Three ZeRO-1 steps, a checkpoint (the sharded state gathered), three more from it: the six steps
    of one run."""
    so = os.path.join(work, "mlp_adamw-clip_zero1.so")
    base = MPIRUN + ["-np", "2", sgc, "train", so, "--data", data, "--threads", "1"]
    whole = run(base + ["--steps", "6"])
    first = run(base + ["--steps", "3", "--save", so + ".half.ckpt"])
    rest = run(base + ["--steps", "3", "--load", so + ".half.ckpt"])
    if whole.returncode or first.returncode or rest.returncode:
        sys.exit(f"FAIL: zero1 resume: {whole.stderr}{first.stderr}{rest.stderr}")
    got, want = losses(first) + losses(rest), losses(whole)
    if got != want:
        sys.exit(f"FAIL: zero1 resumed from its checkpoint: {got} against {want}")
    state = {k: v.shape for k, v in st.read(so + ".half.ckpt").items() if "zero1" in k}
    return state


def check_hash_mismatch(sgc, work, data):
    a, b = (os.path.join(work, f"mlp_{o}_allreduce.so") for o in OPTIMIZERS)
    proc = run(MPIRUN + ["-np", "1", sgc, "train", a, "--data", data, "--steps", "1", ":", "-np", "1", sgc, "train", b, "--data", data,
                         "--steps", "1"], timeout=120)
    said = proc.stderr
    if proc.returncode == 0 or "every rank must run the same compiled program" not in said or said.count("hash") < 2:
        sys.exit(f"FAIL: ranks running different libraries were not refused:\n{said}")
    return said.strip().splitlines()[0]


def check_refusals(sgc, work, data):
    """Two ranks of a library without collectives, and data whose batches are not twice the model's:
    clear errors, no training."""
    one, two = os.path.join(work, "mlp_adamw-clip_one.so"), os.path.join(work, "mlp_adamw-clip_allreduce.so")
    halves = os.path.join(work, "mlp_half_data.safetensors")  # batches of one rank's size
    st.write(halves, {k: v[:, :v.shape[1] // 2] for k, v in st.read(data).items()})
    said = []
    for so, d, expect in ((one, data, "has no collectives"), (two, halves, "need 2 times its leading dim")):
        proc = run(MPIRUN + ["-np", "2", sgc, "train", so, "--data", d, "--steps", "1"], timeout=120)
        if proc.returncode == 0 or expect not in proc.stderr or losses(proc):
            sys.exit(f"FAIL: expected '{expect}':\n{proc.stdout}{proc.stderr}")
        said.append(proc.stderr.strip().splitlines()[0])
    return said


def check_fault(sgc, work, data, include):
    host = os.path.join(work, "fault_rank")
    proc = run(["cc", "-I", include, os.path.join(here, "fault_rank.c"), "-o", host, "-ldl"])
    if proc.returncode:
        sys.exit(f"FAIL: building fault_rank.c: {proc.stderr}")
    so = os.path.join(work, "mlp_adamw-clip_allreduce.so")
    start = time.monotonic()
    # mpirun would otherwise end the whole job when a rank exits with an error: the point here is
    # what the surviving rank's step returns.
    proc = run(MPIRUN + ["--mca", "orte_abort_on_non_zero_status", "0", "-np", "1", sgc, "train", so, "--data", data, "--steps", "4",
                         "--threads", "1", "--comm-timeout", "3", ":", "-np", "1", host, so, "1"], timeout=120)
    took = time.monotonic() - start
    survivor = [l for l in proc.stderr.splitlines() if "(rank 0)" in l]
    if len(losses(proc)) != 1 or not survivor or "did not finish within 3000 ms" not in survivor[0]:
        sys.exit(f"FAIL: the surviving rank did not report the failed peer:\n{proc.stdout}{proc.stderr}")
    return survivor[0], took


def main():
    sgc, work, include = sys.argv[1], sys.argv[2], sys.argv[3]
    if not shutil.which("mpirun"):
        print("SKIP: no mpirun (install openmpi-bin)")
        return
    os.makedirs(work, exist_ok=True)
    print(f"{'model':6} {'optimizer':14} {'mode':10} {'buckets':>7} {'loss rel':>10} {'param rel':>10}")
    worst = 0.0
    for name, cls in (("mlp", te.MLP), ("gpt", te.GPT)):
        paths, data = export(name, cls, work)
        for opt, flags in OPTIMIZERS.items():
            for mode in MODES:
                loss_rel, param_rel, buckets = compare(sgc, work, name, paths, data, opt, flags, mode)
                print(f"{name:6} {opt:14} {mode:10} {buckets:7d} {loss_rel:10.2e} {param_rel:10.2e}")
                if buckets < 2:
                    sys.exit(f"FAIL: {name} {opt} {mode}: expected several gradient buckets, got {buckets}")
                worst = max(worst, loss_rel, param_rel)
    if worst > RTOL:
        sys.exit(f"FAIL: two ranks differ from one by {worst:.2e} (limit {RTOL})")
    data = os.path.join(work, "mlp_data.safetensors")
    state = check_zero1_resume(sgc, work, data)
    print(f"zero1: 3 + 3 steps through a checkpoint = 6 steps; its sharded state, gathered: {state}")
    for line in check_refusals(sgc, work, data):
        print(f"refused: {line}")
    refused = check_hash_mismatch(sgc, work, data)
    print(f"different libraries refused: {refused}")
    said, took = check_fault(sgc, work, data, include)
    print(f"a rank exiting after step 0: the other failed after {took:.1f} s: {said}")
    print("data parallel: ok")


if __name__ == "__main__":
    main()
