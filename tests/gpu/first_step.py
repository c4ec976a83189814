# The first training step of fresh GPU sessions, each in a process of its own, against PyTorch's
# gradient: causal attention at D 128 (bench/gpu_models.py's attn128: 4 x 32 heads x 2,048 x 128,
# a 0.94 GB arena), bf16, one SGD step with a learning rate of 1e3 so that the parameters' change
# is the gradient. The arena used to be cleared on the legacy stream, not ordered before the
# session's uploads: 3 of 8 such runs left every parameter unchanged (2026-12-04).
# Usage: python3 first_step.py LIB.so [RUNS]   (in the GPU bundle: check_gpu.sh)
import json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_models as gm  # noqa: E402

NAME, LR, TOLERANCE = "attn128", 1e3, 1e-3  # PyTorch's bf16 autocast differs by about 1.5e-5


def child(lib):
    """One step in this process; prints each parameter's change over the learning rate."""
    import numpy as np
    import sgc
    with sgc.load(lib).session(device="cuda:0", timeout_ms=120000) as s:
        before = s.state_dict()
        x, y = gm.batch(NAME)
        s.step(x=x, y=y)
        after = s.state_dict()
    print(json.dumps({k: ((before[k].astype(np.float64) - after[k]) / LR).tolist() for k in sorted(before)}))


def torch_gradients():
    import torch
    model = gm.make(NAME).cuda()
    x, y = gm.batch(NAME, "cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        model(x, y).backward()
    return {k: p.grad.double().cpu() for k, p in model.named_parameters()}


def main():
    if sys.argv[1] == "--child":
        child(sys.argv[2])
        return 0
    import torch
    lib, runs = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6
    want = torch_gradients()
    failed = 0
    for run in range(runs):
        p = subprocess.run([sys.executable, __file__, "--child", lib], capture_output=True, text=True)
        if p.returncode:
            print(f"first step, run {run}: FAILED: {p.stderr[-500:]}")
            failed += 1
            continue
        got = json.loads(p.stdout.splitlines()[-1])
        off = {k: float((torch.tensor(got[k], dtype=torch.float64) - w).norm() / w.norm()) for k, w in want.items()}
        bad = max(off.values()) > TOLERANCE
        failed += bad
        print(f"first step, run {run}: gradients' relative difference from PyTorch's " +
              ", ".join(f"{k} {v:.1e}" for k, v in sorted(off.items())) + (" FAILED" if bad else ""))
    print(f"first SGD step of {NAME} in {runs} fresh GPU sessions: {runs - failed} matched PyTorch within {TOLERANCE:g}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
