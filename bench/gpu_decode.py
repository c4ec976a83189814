# Decoding on the GPU, against PyTorch in the same run (bench/gpu_decode_build.sh made the
# libraries). Three measurements; prints a table and writes JSON to $OUT/gpu_decode.json:
#
#   kernel  paged decode attention (attn.so: one layer, 32 heads of 128, bf16 cache in 16-token
#           pages) for 64 sequences at contexts 4081..4096, timed per launch (SGC_PROFILE) over 16
#           decode steps, against F.scaled_dot_product_attention over a contiguous [64, 32, 4096,
#           128] cache: bytes of cache read per second, and the ratio.
#   e2e     greedy decoding with the GPT-2-small-size decoder (gpt2.so, bf16) at batch 64: 64
#           prompts of 128 tokens, then 128 decode steps; tokens per second of the decode steps,
#           against the same model in PyTorch eager (bf16, its past_key_values cache grown by cat);
#           sgc's greedy tokens also chosen on the device, and tokens sampled there (temperature 0.8,
#           top-k 50, top-p 0.95).
#   hf      Hugging Face GPT-2 at GPT-2 small's size (bench/export_hf_gpt2.py: exported as a plain
#           causal LM, compiled with --mode decode into hf_gpt2.so, 64 tokens a step, and
#           hf_gpt2_t1024.so, 1024 tokens a step with a token bucket of 64; the prompts prefilled
#           together by sgc_seqs_add) against transformers' own `generate` on the same weights, greedy, bf16, 64
#           prompts of 128 tokens and 128 new tokens: wall time of the whole call, prefill included,
#           median of 3 after a warm-up, with its dynamic cache and with cache_implementation=
#           "static" (which compiles the step with torch.compile). Also the time to the first token
#           of a 1024-token prompt, and the prefill that prefix caching saves when 64 requests
#           share a 512-token system prompt.
#   profile the decoding step of hf_gpt2_t1024's bucket of 64 by kernel family, and the host's
#           time per step with CUDA graphs and without (profiled)
#   waste   the cache memory allocated but unused for 64 sequences of mixed lengths (1..896 tokens,
#           plus 64 decoded): paged (16-token pages) against a contiguous cache per sequence of the
#           max context, and one padded to the batch's longest sequence.
#
# Both sides use the same weights: PyTorch's model (tests/decode/gpt_decoder.py, seed 0) is
# written to a safetensors file that the library loads.
# Usage: python3 bench/gpu_decode.py bench/out/decode [kernel,e2e,hf,waste]
import json, os, subprocess, sys, time
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "decode"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "pyutil"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import gpt_decoder as g
import sgc  # the Python package over the C ABI
import st
from gpu_train import library_env, unpacked

BATCH, HEADS, HEAD_DIM, CONTEXT, KERNEL_STEPS = 64, 32, 128, 4096, 16
PROMPT, NEW = 128, 128
SAMPLE = {"temperature": 0.8, "top_k": 50, "top_p": 0.95, "seed": 1}  # e2e's sampled run, drawn where the step runs


def weights(size, path):
    """The PyTorch model's parameters (float32), as the library loads them."""
    m = g.make(0, size)
    st.write(path, {k: v.detach().numpy() for k, v in m.state_dict().items()})
    return m


def session(so, wfile):
    s = sgc.load(so).session(device="cuda:0")
    s.load(wfile)
    s.vocab = s.decode_info()["vocab"]
    return s


def logits_step(s, seqs, tokens):
    """One decode step; the logits as a [len(seqs), vocab] array (written in place: no Python lists)."""
    return s.decode(seqs, tokens, out=np.empty((len(seqs), s.vocab), np.float32))


def add(s, prompt):
    return s.add(prompt, out=np.empty(s.vocab, np.float32))


# ---- kernel: in a child process (its profile is written when its session ends) ----
def kernel_child(so, wfile, prof):
    d = session(so, wfile)
    rng = np.random.default_rng(0)
    prompt = CONTEXT - KERNEL_STEPS
    seqs = [add(d, rng.integers(0, d.vocab, prompt).tolist())[0] for _ in range(BATCH)]
    for _ in range(KERNEL_STEPS):
        logits_step(d, seqs, rng.integers(0, d.vocab, BATCH).tolist())
    d.close()  # writes the profile


def kernel(out_dir, env):
    so = unpacked(os.path.join(out_dir, "attn.so"))
    wfile = os.path.join(out_dir, "attn_init.safetensors")
    weights("attn", wfile)
    prof = os.path.join(os.environ.get("OUT", "."), "attn_profile.tsv")
    # Profile only the decode steps: the prefill steps come first.
    probe = subprocess.run([sys.executable, __file__, "--kernel-child", so, wfile, prof], capture_output=True, text=True,
                           env=dict(env, SGC_PROFILE=prof, SGC_PROFILE_FROM=str(BATCH * -(-(CONTEXT - KERNEL_STEPS) // 256))))
    if probe.returncode:
        return {"error": probe.stderr[-2000:]}
    rows = [l.split("\t") for l in open(prof).read().splitlines()[1:]]
    attn_ms = sum(float(r[3]) for r in rows if "PagedAttention" in r[1])
    step_ms = sum(float(r[3]) for r in rows if r[2] == "step")
    # Bytes of keys and values read per step: contexts 4081..4096, averaged over the steps.
    ctx = np.mean(np.arange(CONTEXT - KERNEL_STEPS + 1, CONTEXT + 1))
    read = BATCH * HEADS * ctx * HEAD_DIM * 2 * 2
    q = torch.randn(BATCH, HEADS, 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(BATCH, HEADS, CONTEXT, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    sdpa_ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v), warm=5, iters=50)
    sdpa_tbps = 2 * k.numel() * 2 / (sdpa_ms * 1e-3) / 1e12
    sgc_tbps = read / (attn_ms * 1e-3) / 1e12
    return {"sgc_ms": attn_ms, "sgc_ms_at_4096": attn_ms * CONTEXT / ctx, "sgc_TBps": sgc_tbps, "sgc_step_ms": step_ms, "sdpa_ms": sdpa_ms,
            "sdpa_TBps": sdpa_tbps, "throughput_ratio": sgc_tbps / sdpa_tbps}


def median_ms(fn, warm=3, iters=10):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    return sorted(ts)[len(ts) // 2]


# ---- e2e ----
def e2e_child(so, wfile, mode="logits"):
    """Greedy decoding of 64 prompts: with mode "logits" the host takes each step's logits and its
    argmax; with "greedy" the step hands back one token a sequence (sgc_decode_step_greedy)."""
    d = session(so, wfile)
    rng = np.random.default_rng(1)
    prompts = rng.integers(0, d.vocab, (BATCH, PROMPT))
    seqs, nxt = [], []
    for p in prompts:
        seq, logits = add(d, p.tolist())
        seqs.append(seq)
        nxt.append(int(logits.argmax()))
    out = [nxt]
    t0 = time.perf_counter()
    in_step = 0.0
    for _ in range(NEW - 1):
        t1 = time.perf_counter()
        if mode in ("greedy", "sample"):
            out.append(d.decode(seqs, out[-1], greedy=True) if mode == "greedy" else d.decode(seqs, out[-1], sample=SAMPLE))
            in_step += time.perf_counter() - t1
            continue
        logits = logits_step(d, seqs, out[-1])
        in_step += time.perf_counter() - t1
        out.append(logits.argmax(axis=1).tolist())
    secs = time.perf_counter() - t0
    d.close()  # writes the profile, if asked for
    print(json.dumps({"decode_s": secs, "in_decode_step_s": in_step, "tokens_per_s": BATCH * (NEW - 1) / secs, "tokens": np.array(out).T.tolist()}))


def e2e(out_dir, env):
    so = unpacked(os.path.join(out_dir, "gpt2.so"))
    wfile = os.path.join(out_dir, "gpt2_init.safetensors")
    m = weights("gpt2", wfile)
    proc = subprocess.run([sys.executable, __file__, "--e2e-child", so, wfile], capture_output=True, text=True, env=env)
    if proc.returncode:
        return {"error": proc.stderr[-2000:]}
    sgc = json.loads(proc.stdout.splitlines()[-1])
    proc = subprocess.run([sys.executable, __file__, "--e2e-child", so, wfile, "greedy"], capture_output=True, text=True, env=env)
    if proc.returncode:
        return {"error": proc.stderr[-2000:]}
    greedy = json.loads(proc.stdout.splitlines()[-1])
    proc = subprocess.run([sys.executable, __file__, "--e2e-child", so, wfile, "sample"], capture_output=True, text=True, env=env)
    if proc.returncode:
        return {"error": proc.stderr[-2000:]}
    sampled = json.loads(proc.stdout.splitlines()[-1])
    prof = os.path.join(os.environ.get("OUT", "."), "gpt2_profile.tsv")  # the decode steps' launches, without a CUDA graph
    subprocess.run([sys.executable, __file__, "--e2e-child", so, wfile], capture_output=True, text=True,
                   env=dict(env, SGC_PROFILE=prof, SGC_PROFILE_FROM=str(BATCH * -(-PROMPT // 64))))
    subprocess.run([sys.executable, __file__, "--e2e-child", so, wfile, "sample"], capture_output=True, text=True,  # the sampled steps' too
                   env=dict(env, SGC_PROFILE=prof.replace(".tsv", "_sampled.tsv"), SGC_PROFILE_FROM=str(BATCH * -(-PROMPT // 64))))
    m = m.to("cuda").to(torch.bfloat16)
    rng = np.random.default_rng(1)
    prompts = torch.tensor(rng.integers(0, m.wte.num_embeddings, (BATCH, PROMPT)), device="cuda")
    with torch.no_grad():
        pos = torch.arange(PROMPT, device="cuda").expand(BATCH, PROMPT)
        logits, *past = m(prompts, pos, *g.empty_cache(m, BATCH, torch.bfloat16, "cuda"))
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out = [nxt]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for t in range(NEW - 1):
            logits, *past = m(nxt, torch.full((BATCH, 1), PROMPT + t, device="cuda"), *past)
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out.append(nxt)
        torch.cuda.synchronize()
        secs = time.perf_counter() - t0
    eager = torch.cat(out, 1).tolist()
    same = np.mean([a == b for x, y in zip(sgc["tokens"], eager) for a, b in zip(x, y)])
    first = np.mean([x[0] == y[0] for x, y in zip(sgc["tokens"], eager)])
    return {"sgc_greedy_tokens_per_s": greedy["tokens_per_s"], "sgc_greedy_in_decode_step_s": greedy["in_decode_step_s"],
            "sgc_sampled_tokens_per_s": sampled["tokens_per_s"], "sgc_sampled_in_decode_step_s": sampled["in_decode_step_s"],
            "greedy_same_tokens_as_logits": greedy["tokens"] == sgc["tokens"],
            "sgc_in_decode_step_s": sgc["in_decode_step_s"], "sgc_decode_s": sgc["decode_s"], "eager_decode_s": secs, "sgc_tokens_per_s": sgc["tokens_per_s"], "eager_tokens_per_s": BATCH * (NEW - 1) / secs, "ratio": sgc["tokens_per_s"] / (BATCH * (NEW - 1) / secs),
            "same_tokens": same, "same_first_token": first}


# ---- hf: Hugging Face's model and its generate ----
HF_PROMPT, HF_NEW, SYSTEM, SUFFIX = 128, 128, 512, 64


def hf_model():
    sys.path.insert(0, HERE)
    import export_hf_gpt2
    return export_hf_gpt2.model()


def hf_child(so, wfile):
    """sgc's side: greedy decoding of 64 prompts (prefilled together, then steps), timed whole as generate is;
    the first token of a 1024-token prompt; 64 requests with one 512-token system prompt."""
    d = session(so, wfile)
    rng = np.random.default_rng(3)
    # Freed prompts' pages stay cached: each run has prompts of its own (the first, untimed, is the
    # one transformers' generate gets too), and so has each first-token run.
    runs = [rng.integers(0, d.vocab, (BATCH, HF_PROMPT)).tolist() for _ in range(4)]

    def generate(prompts):
        seqs, first = d.add_many(prompts)  # prefilled together (sgc_seqs_add)
        out = [[t] for t in first]
        for _ in range(HF_NEW - 1):
            for o, t in zip(out, d.decode(seqs, [o[-1] for o in out], greedy=True)):
                o.append(t)
        for seq in seqs:
            d.free(seq)
        return out

    times, tokens = [], None
    for prompts in runs:
        t0 = time.perf_counter()
        got = generate(prompts)
        times.append(time.perf_counter() - t0)
        tokens = tokens or got
    secs = sorted(times[1:])[1]
    ttft = []
    for _ in range(4):
        long = rng.integers(0, d.vocab, 1024).tolist()
        t0 = time.perf_counter()
        seq, _ = d.add(long, greedy=True)
        ttft.append(time.perf_counter() - t0)
        d.free(seq)
    prefix = {}
    for shared in (False, True):  # fresh system prompts, so no earlier run's pages are found
        system = rng.integers(0, d.vocab, SYSTEM).tolist()
        prompts = [(system if shared else rng.integers(0, d.vocab, SYSTEM).tolist()) + rng.integers(0, d.vocab, SUFFIX).tolist()
                   for _ in range(BATCH)]
        t0 = time.perf_counter()
        # The first alone, then the rest together: a batch shares the pages of sequences live before it.
        seqs = [d.add(prompts[0], greedy=True)[0]] + d.add_many(prompts[1:])[0]
        prefix["shared_s" if shared else "distinct_s"] = time.perf_counter() - t0
        prefix["pages_held_shared" if shared else "pages_held_distinct"] = d.decode_info()["blocks"] - d.decode_info()["free_pages"]
        for seq in seqs:
            d.free(seq)
    print(json.dumps({"generate_s": secs, "tokens_per_s": BATCH * HF_NEW / secs, "ttft_1024_s": sorted(ttft[1:])[1], "prefix": prefix,
                      "tokens": tokens}))


def hf(out_dir, env):
    m = hf_model()
    res = {}
    for name in ("hf_gpt2", "hf_gpt2_t1024"):
        so = unpacked(os.path.join(out_dir, name + ".so"))
        if not os.path.exists(so):
            continue
        wfile = os.path.join(out_dir, "hf_gpt2.safetensors")
        if not os.path.exists(wfile):
            names = sgc.load(so).session().parameter_names()
            sd = m.state_dict()
            st.write(wfile, {n: sd[n[2:]].detach().numpy() for n in names})  # the export's names: "m." + state_dict's
        proc = subprocess.run([sys.executable, __file__, "--hf-child", so, wfile], capture_output=True, text=True, env=env)
        res[name] = json.loads(proc.stdout.splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr[-2000:]}
    m = m.to("cuda").to(torch.bfloat16)
    rng = np.random.default_rng(3)
    prompts = torch.tensor(rng.integers(0, 50257, (BATCH, HF_PROMPT)), device="cuda")
    mask = torch.ones_like(prompts)
    for impl in ("dynamic", "static"):
        kw = dict(attention_mask=mask, max_new_tokens=HF_NEW, min_new_tokens=HF_NEW, do_sample=False, pad_token_id=0)
        if impl == "static":
            kw["cache_implementation"] = "static"
        times = []
        with torch.no_grad():
            for _ in range(4):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = m.generate(prompts, **kw)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
        secs = sorted(times[1:])[1]
        toks = out[:, HF_PROMPT:].tolist()
        res["generate_" + impl] = {"generate_s": secs, "tokens_per_s": BATCH * HF_NEW / secs, "first_call_s": times[0]}
        for name in ("hf_gpt2", "hf_gpt2_t1024"):
            if "tokens" in res.get(name, {}):
                got = res[name]["tokens"]
                res[name]["same_tokens_as_" + impl] = float(np.mean([a == b for x, y in zip(got, toks) for a, b in zip(x, y)]))
                res[name]["same_first_token_as_" + impl] = float(np.mean([x[0] == y[0] for x, y in zip(got, toks)]))
                res[name]["ratio_to_" + impl] = res[name]["tokens_per_s"] / res["generate_" + impl]["tokens_per_s"]
    long = torch.tensor(rng.integers(0, 50257, (1, 1024)), device="cuda")
    ttft = []
    with torch.no_grad():
        for _ in range(4):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            m.generate(long, attention_mask=torch.ones_like(long), max_new_tokens=1, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            ttft.append(time.perf_counter() - t0)
    res["generate_ttft_1024_s"] = sorted(ttft[1:])[1]
    for name in ("hf_gpt2", "hf_gpt2_t1024"):
        res.get(name, {}).pop("tokens", None)
    return res


def profile_child(so, wfile):
    """Prefill 64 prompts of 128 together, then 32 greedy decoding steps (the bucket of 64), each
    timed on the host; the profile (SGC_PROFILE: no graphs) is written as the session closes."""
    d = session(so, wfile)
    rng = np.random.default_rng(5)
    seqs, toks = d.add_many(rng.integers(0, d.vocab, (BATCH, HF_PROMPT)).tolist())
    times = []
    for _ in range(32):
        t0 = time.perf_counter()
        toks = d.decode(seqs, toks, greedy=True)
        times.append(time.perf_counter() - t0)
    d.close()
    print(json.dumps({"step_ms": 1e3 * float(np.median(times[4:]))}))


def profile(out_dir, env):
    """The decoding step of hf_gpt2_t1024's bucket of 64 by kernel family (SGC_PROFILE), and the
    host's time per step with and without CUDA graphs."""
    so = unpacked(os.path.join(out_dir, "hf_gpt2_t1024.so"))
    wfile = os.path.join(out_dir, "hf_gpt2.safetensors")
    if not os.path.exists(wfile):
        names = sgc.load(so).session().parameter_names()
        sd = hf_model().state_dict()
        st.write(wfile, {n: sd[n[2:]].detach().numpy() for n in names})
    prof = os.path.join(os.environ.get("OUT", "."), "decode_profile.tsv")
    res = {}
    for name, extra in (("graphs", {}), ("profiled", {"SGC_PROFILE": prof, "SGC_PROFILE_FROM": "4"})):
        proc = subprocess.run([sys.executable, __file__, "--profile-child", so, wfile], capture_output=True, text=True, env=dict(env, **extra))
        res[name] = json.loads(proc.stdout.splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr[-2000:]}
    rows = [l.split("\t") for l in open(prof + ".tokens64").read().splitlines()[1:]] if os.path.exists(prof + ".tokens64") else []
    families = {}
    for r in rows:
        if r[0] == "step":
            res["gpu_step_ms"] = float(r[3])
            continue
        fam = "cublaslt" if r[2] == "cublaslt" else r[1].split("+")[0]
        families[fam] = families.get(fam, 0.0) + float(r[3])
    res["families_ms"] = dict(sorted(families.items(), key=lambda kv: -kv[1]))
    res["launches"] = len(rows) - 1
    res["top"] = sorted(([r[1], r[2], float(r[3])] for r in rows if r[0] != "step"), key=lambda x: -x[2])[:12]
    return res


def waste(out_dir, env):
    so = unpacked(os.path.join(out_dir, "gpt2.so"))
    wfile = os.path.join(out_dir, "gpt2_init.safetensors")
    if not os.path.exists(wfile):
        weights("gpt2", wfile)
    proc = subprocess.run([sys.executable, __file__, "--waste-child", so, wfile], capture_output=True, text=True, env=env)
    return json.loads(proc.stdout.splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr[-2000:]}


def waste_child(so, wfile):
    d = session(so, wfile)
    info = d.decode_info()
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 897, BATCH)
    seqs = [add(d, rng.integers(0, d.vocab, n).tolist())[0] for n in lengths]
    for _ in range(64):
        logits_step(d, seqs, rng.integers(0, d.vocab, BATCH).tolist())
    held = [d.length(s) for s in seqs]
    pages = info["blocks"] - d.decode_info()["free_pages"]
    used = sum(held)
    print(json.dumps({"tokens": used, "paged_slots": pages * info["block_size"], "paged_waste": 1 - used / (pages * info["block_size"]),
                      "contiguous_max_context_waste": 1 - used / (BATCH * info["max_context"]),
                      "padded_to_longest_waste": 1 - used / (BATCH * max(held))}))


def main():
    if sys.argv[1] == "--kernel-child":
        return kernel_child(*sys.argv[2:4], sys.argv[4])
    if sys.argv[1] == "--e2e-child":
        return e2e_child(*sys.argv[2:5])
    if sys.argv[1] == "--hf-child":
        return hf_child(*sys.argv[2:4])
    if sys.argv[1] == "--profile-child":
        return profile_child(*sys.argv[2:4])
    if sys.argv[1] == "--waste-child":
        return waste_child(*sys.argv[2:4])
    out_dir, parts = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "kernel,e2e,waste").split(",")
    env = library_env()
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    for part in parts:
        res[part] = {"kernel": kernel, "e2e": e2e, "hf": hf, "waste": waste, "profile": profile}[part](out_dir, env)
        print(part, json.dumps(res[part]), flush=True)
    json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "gpu_decode.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
