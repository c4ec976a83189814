# A/B of sgc builds on the device: for each model, every NAME_VARIANT.so (or .so.xz) in DIR runs
# through gpu_train.py's sgc side on the model's seed-0 weights, the variants alternating
# (A B A B ...) so that drift in the card's clocks falls on all of them; then each is profiled
# once (SGC_PROFILE, no graph) into $OUT/VARIANT_profile.tsv. Prints each run's ms/step and first
# losses, each variant's median and its ratio to the first variant by name, and writes the runs
# to $OUT/ab.json. For changes the full benchmark (gpu_train.py, PyTorch in the same run) cannot
# resolve within its noise. Each --env "NAME=VALUE ..." (repeatable) runs every library again with
# those variables set, as a variant of its own (the runtime's switches: SGC_GEMM_TUNING=0, ...).
# Usage: python3 bench/gpu_ab.py DIR gpt,llama [runs of each] [--env "NAME=VALUE ..."]...
import argparse, glob, json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests", "pyutil")]
import gpu_models as gm
import gpu_train as gt
import st


def main():
    ap = argparse.ArgumentParser(description="A/B of sgc builds (and runtime switches) on the device")
    ap.add_argument("dir"), ap.add_argument("models"), ap.add_argument("runs", nargs="?", type=int, default=2)
    ap.add_argument("--env", action="append", default=[], help='"NAME=VALUE ..." set for a variant of each library')
    ap.add_argument("--no-profile", action="store_true", help="leave out the profile of each library")
    a = ap.parse_args()
    lib_dir, models, runs = a.dir, a.models.split(","), a.runs
    out, base = os.environ.get("OUT", "."), gt.library_env()
    settings = [{}] + [dict(kv.split("=", 1) for kv in e.split()) for e in a.env]
    res = {}
    for name in models:
        weights = os.path.join(out, f"{name}_init.safetensors")
        st.write(weights, {k: v.clone() for k, v in gm.make(name).state_dict().items()})
        libs = sorted({p[:-3] if p.endswith(".xz") else p for p in glob.glob(os.path.join(lib_dir, f"{name}_*.so*"))})
        # (name, library, environment) for each library with each setting: NAME_VARIANT[+A=0,B=1]
        cases = [(os.path.basename(lib)[:-3] + ("+" + ",".join(f"{k}={v}" for k, v in e.items()) if e else ""), lib, dict(base, **e))
                 for e in settings for lib in libs]
        for run in range(runs):
            for v, lib, env in cases:
                p = subprocess.run([sys.executable, gt.__file__, "--sgc", gt.unpacked(lib), weights, name], capture_output=True, text=True, env=env)
                r = json.loads(p.stdout.splitlines()[0]) if p.stdout.strip() else {"error": p.stderr[-800:]}
                res.setdefault(v, []).append(r)
                c = r.get("clocks") or {}
                print(v, run, round(r.get("ms", -1), 3), r.get("losses", r.get("error")), f"SM {c['sm_MHz']:.0f} MHz, {c['power_W']:.0f} W" if c else "", flush=True)
                if run == 0 and "device" in r:
                    print("   ", r["device"], "; library sha256", gt.library_hash(lib)[:12], flush=True)
        times = {v: sorted(r["ms"] for r in res[v] if "ms" in r) for v, _, _ in cases}
        first = None
        for v, ms in times.items():
            if not ms:
                continue
            m = (ms[(len(ms) - 1) // 2] + ms[len(ms) // 2]) / 2  # of an even count, the middle two's mean
            first = first or m
            print(f"{v}: median {m:.3f} ms, {m / first:.4f}x the first", flush=True)
        for lib in [] if a.no_profile else libs:
            variant = os.path.basename(lib)[:-3]
            prof = os.path.join(out, f"{variant}_profile.tsv")
            subprocess.run([sys.executable, gt.__file__, "--sgc", gt.unpacked(lib), weights, name], capture_output=True, text=True,
                           env=dict(base, SGC_PROFILE=prof, SGC_PROFILE_FROM="1"))
            if os.path.exists(prof):
                s = gt.profile_summary(prof)
                print(variant, "profile", round(s["step_ms"], 3), {k: round(x, 3) for k, x in s["families_ms"].items()}, flush=True)
        os.remove(weights)
        json.dump(res, open(os.path.join(out, "ab.json"), "w"), indent=1)  # after each model: a cut call keeps the finished ones


if __name__ == "__main__":
    main()
