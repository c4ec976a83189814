# The real-model suite on the GPU: each library gpu_build.sh made (bf16, sm_90)
# trains 10 steps on cuda:0 through the C ABI; every step's loss must be within
# 2e-2 relative of PyTorch's float32 losses, or, for a network whose training
# is chaotic enough that PyTorch's own bf16 autocast run (torch_bf16.json,
# written by torch_bf16.py on the GPU) moves further than 1e-2 from its float32
# one, within twice PyTorch's own bf16 difference. Prints SKIP without a GPU.
# Usage: python3 check_gpu_models.py DIR
import glob, json, lzma, os, shutil, subprocess, sys

d = sys.argv[1]
if not shutil.which("nvidia-smi") or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode:
    print("SKIP: no GPU on this machine")
    sys.exit(0)
failed = 0
ref_path = os.path.join(d, "torch_bf16.json")
torch_bf16 = json.load(open(ref_path))["models"] if os.path.exists(ref_path) else {}
for xz in sorted(glob.glob(os.path.join(d, "*.so.xz"))):
    so = xz[:-3]
    with lzma.open(xz) as src, open(so, "wb") as dst:
        dst.write(src.read())
    name, export = os.path.basename(so).split(".")[:2]
    info = json.load(open(os.path.join(d, name + ".json")))
    p = subprocess.run([sys.executable, os.path.join(d, "train_ctypes.py"), so, os.path.join(d, name + ".inputs.safetensors"),
                        str(info["steps"]), "cuda:0"], capture_output=True, text=True)
    got = [json.loads(l)["loss"] for l in p.stdout.splitlines() if l.startswith("{")]
    ref = info["losses_f32"]
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref)) if len(got) == len(ref) else float("inf")
    theirs = torch_bf16.get(name, {}).get("bf16_vs_f32")
    limit = max(2e-2, 2 * theirs) if theirs is not None and theirs > 1e-2 else 2e-2
    ok = worst <= limit
    failed += not ok
    own = f"(PyTorch's own bf16: {theirs:.2e}; limit {limit:.1e})" if theirs is not None else "(limit 2e-2)"
    print(f"{name:16s} {export:13s} bf16 on the GPU: max relative loss difference from PyTorch float32 {worst:.2e} {own} "
          f"{'ok' if ok else 'FAILED ' + p.stderr[-300:]}")
print(f"{failed} failed")
sys.exit(1 if failed else 0)
