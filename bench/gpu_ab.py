# A/B of sgc builds on the device: for each model, every NAME_VARIANT.so (or .so.xz) in DIR runs
# through gpu_train.py's sgc side on the model's seed-0 weights, the variants alternating
# (A B A B ...) so that drift in the card's clocks falls on all of them; then each is profiled
# once (SGC_PROFILE, no graph) into $OUT/VARIANT_profile.tsv. Prints each run's ms/step and first
# losses, each variant's median and its ratio to the first variant by name, and writes the runs
# to $OUT/ab.json. For changes the full benchmark (gpu_train.py, PyTorch in the same run) cannot
# resolve within its noise.
# Usage: python3 bench/gpu_ab.py DIR gpt,llama [runs of each]
import glob, json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests", "pyutil")]
import gpu_models as gm
import gpu_train as gt
import st


def main():
    lib_dir, models = sys.argv[1], sys.argv[2].split(",")
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    out, env = os.environ.get("OUT", "."), gt.library_env()
    res = {}
    for name in models:
        weights = os.path.join(out, f"{name}_init.safetensors")
        st.write(weights, {k: v.clone() for k, v in gm.make(name).state_dict().items()})
        libs = sorted({p[:-3] if p.endswith(".xz") else p for p in glob.glob(os.path.join(lib_dir, f"{name}_*.so*"))})
        variant = lambda lib: os.path.basename(lib)[:-3]
        for run in range(runs):
            for lib in libs:
                p = subprocess.run([sys.executable, gt.__file__, "--sgc", gt.unpacked(lib), weights, name], capture_output=True, text=True, env=env)
                r = json.loads(p.stdout.splitlines()[0]) if p.stdout.strip() else {"error": p.stderr[-800:]}
                res.setdefault(variant(lib), []).append(r)
                print(variant(lib), run, round(r.get("ms", -1), 3), r.get("losses", r.get("error")), flush=True)
        medians = {variant(lib): sorted(r["ms"] for r in res[variant(lib)] if "ms" in r) for lib in libs}
        first = None
        for v, ms in medians.items():
            if not ms:
                continue
            m = ms[len(ms) // 2]
            first = first or m
            print(f"{v}: median {m:.3f} ms, {m / first:.4f}x the first", flush=True)
        for lib in libs:
            prof = os.path.join(out, f"{variant(lib)}_profile.tsv")
            subprocess.run([sys.executable, gt.__file__, "--sgc", gt.unpacked(lib), weights, name], capture_output=True, text=True,
                           env=dict(env, SGC_PROFILE=prof, SGC_PROFILE_FROM="1"))
            if os.path.exists(prof):
                s = gt.profile_summary(prof)
                print(variant(lib), "profile", round(s["step_ms"], 3), {k: round(x, 3) for k, x in s["families_ms"].items()}, flush=True)
        os.remove(weights)
    json.dump(res, open(os.path.join(out, "ab.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
