# The real-model suite on the GPU: each library gpu_build.sh made (bf16, sm_90)
# trains 10 steps on cuda:0 through the C ABI; every step's loss must be within
# 2e-2 relative of PyTorch's float32 losses. Prints SKIP without a GPU.
# Usage: python3 check_gpu_models.py DIR
import glob, json, lzma, os, shutil, subprocess, sys

d = sys.argv[1]
if not shutil.which("nvidia-smi") or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode:
    print("SKIP: no GPU on this machine")
    sys.exit(0)
failed = 0
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
    ok = worst <= 2e-2
    failed += not ok
    print(f"{name:16s} {export:13s} bf16 on the GPU: max relative loss difference from PyTorch float32 {worst:.2e} {'ok' if ok else 'FAILED ' + p.stderr[-300:]}")
print(f"{failed} failed")
sys.exit(1 if failed else 0)
