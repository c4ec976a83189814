"""Decoding with the paged key/value cache, against PyTorch's own greedy decoding.

  decode_test.py prepare SGC WORK   export the decoder of gpt_decoder.py with its cache, compile it
                                    with --mode decode (gen.so, and small.so with a tiny pool), and
                                    write PyTorch's greedy tokens for every scenario to ref.json
  decode_test.py check WORK DEVICE  run the scenarios through the C ABI (ctypes) on DEVICE (cpu or
                                    cuda:0) and through `sgc generate` (SGC given: cpu only)
  decode_test.py all SGC WORK       both, on the CPU (the CTest)

Scenarios: prompts of different lengths decoded together; sequences joining and leaving mid-way;
a fork whose child takes another token (copy on write of the shared, partly filled page); a
randomized mix of add/fork/free/step on a tiny pool whose page accounting is checked after every
call against a model of the pages kept here; prompts prefilled together (sgc_seqs_add), and in a
library with token buckets; and the statuses of bad calls.
"""
import ctypes
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [40], [30, 31, 32, 33, 34, 35, 36]]
NEW = 12
BLOCK = 4
SMALL = dict(blocks=10, context=24, seqs=4)  # small.so
SYSTEM = [20, 21, 22, 23, 24, 25, 26, 27]  # two pages of BLOCK tokens
PREFIXED = [SYSTEM + [50, 51], SYSTEM + [60, 61, 62], SYSTEM]  # the last: its second page is computed (its last token's logits)
OK, INVALID, NOT_FOUND, OUT_OF_PAGES = 0, 1, 2, 10


def prepare(sgc, work):
    sys.path.insert(0, HERE)
    import torch
    import gpt_decoder as g
    os.makedirs(work, exist_ok=True)
    m = g.make(0)
    onnx_path = os.path.join(work, "gpt.onnx")
    g.export(m, onnx_path)
    targets = "cpu,sm_90" if os.path.exists("/usr/local/cuda/bin/ptxas") else "cpu"
    base = [sgc, "compile", onnx_path, "--mode", "decode", "--kv-block-size", str(BLOCK), "--target", targets]
    subprocess.run(base + ["--max-seqs", "4", "--max-context", "64", "--max-tokens", "8", "-o", os.path.join(work, "gen.so")], check=True)
    # A large step with token buckets of 1 and 4: prompts prefill together in the step of 32, a
    # decoding step of up to 4 sequences runs the bucket of 4, of one the bucket of 1.
    subprocess.run(base + ["--max-seqs", "4", "--max-context", "64", "--max-tokens", "32", "--token-buckets", "1,4",
                           "-o", os.path.join(work, "buckets.so")], check=True)
    subprocess.run(base + ["--max-seqs", str(SMALL["seqs"]), "--max-context", str(SMALL["context"]), "--kv-blocks", str(SMALL["blocks"]),
                           "--max-tokens", "4", "-o", os.path.join(work, "small.so")], check=True)
    # A model that is no language model (without a cache, it is taken for a plain one), and missing
    # flags: errors that say what is wrong.
    mlp = os.path.join(HERE, "..", "..", "samples", "mlp.onnx")
    for args, words in [([mlp, "--max-context", "8", "--input-ids", "x"], "must be integer token ids"),
                        ([onnx_path], "--mode decode needs --max-context"),
                        ([onnx_path, "--max-context", "64", "--kv-blocks", "3", "--kv-block-size", "16"], "cannot hold one sequence")]:
        r = subprocess.run([sgc, "compile", "--mode", "decode", "-o", os.path.join(work, "bad.so")] + args, capture_output=True, text=True)
        if r.returncode == 0 or words not in r.stderr:
            raise AssertionError("sgc compile %s: expected an error saying '%s', got status %d: %s" % (args, words, r.returncode, r.stderr))
    # The same decoder (same weights) counting its positions from the cache's length, as Hugging
    # Face's models do when given no position ids.
    m.cache_positions = True
    g.export(m, os.path.join(work, "gpt_cachepos.onnx"))
    m.cache_positions = False
    subprocess.run(base[:2] + [os.path.join(work, "gpt_cachepos.onnx")] + base[3:] +
                   ["--max-seqs", "4", "--max-context", "64", "--max-tokens", "8", "-o", os.path.join(work, "cachepos.so")], check=True)
    runs = [g.greedy(m, p, NEW, with_logits=True) for p in PROMPTS]
    ref = {"greedy": [r[0] for r in runs], "logits": [r[1] for r in runs]}
    # The fork: prompt 3 and k generated tokens are cached; the parent appends its next greedy token,
    # the child the runner-up of the same logits.
    k = 4
    seq = PROMPTS[3] + ref["greedy"][3][:k]
    with torch.no_grad():
        logits = m(torch.tensor([seq]), torch.arange(len(seq)).unsqueeze(0), *g.empty_cache(m, 1))[0][0, -1]
    alt = int(logits.topk(2).indices[1])
    child, child_logits = g.greedy(m, seq + [alt], 6, with_logits=True)
    ref["fork"] = {"k": k, "alt": alt, "child": child, "logits": child_logits}
    ref["context"] = SMALL["context"]
    # Prefix caching: prompts that start with the same two pages (8 tokens) as a live one.
    ref["prefix"] = {"prompts": [p for p in PREFIXED], "greedy": [g.greedy(m, p, NEW) for p in PREFIXED]}
    # A bf16 cache with heads of 64 (the GPU's warp-per-head paged attention; the products stay
    # float32): PyTorch's float32 logits along its greedy path, which the library is fed.
    m64 = g.make(1, "test64")
    g.export(m64, os.path.join(work, "gpt64.onnx"))
    subprocess.run([sgc, "compile", os.path.join(work, "gpt64.onnx"), "--mode", "decode", "--kv-block-size", "8", "--target", targets,
                    "--kv-cache-dtype", "bf16", "--max-seqs", "4", "--max-context", "64", "--max-tokens", "8", "-o", os.path.join(work, "gen64.so")],
                   check=True)
    runs = [g.greedy(m64, p, NEW, with_logits=True) for p in PROMPTS]
    ref["bf16"] = {"greedy": [r[0] for r in runs], "logits": [r[1] for r in runs]}
    # All of it in bf16 (products and weights): with its weights embedded, and without them, loaded
    # from PyTorch's float32 ones (rounded as they load).
    for weights in ("embedded", "none"):
        subprocess.run([sgc, "compile", os.path.join(work, "gpt64.onnx"), "--mode", "decode", "--kv-block-size", "8", "--target", targets,
                        "--precision", "bf16", "--max-seqs", "4", "--max-context", "64", "--weights", weights,
                        "-o", os.path.join(work, "gen64_bf16_%s.so" % weights)], check=True)
    sys.path.insert(0, os.path.join(HERE, "..", "pyutil"))
    import st
    st.write(os.path.join(work, "gpt64.safetensors"), {k: v.detach().numpy() for k, v in m64.state_dict().items()})
    with open(os.path.join(work, "ref.json"), "w") as f:
        json.dump(ref, f)


class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("block_size", "blocks", "max_seqs", "max_context", "tokens_per_step", "vocab", "layers",
                                               "free_pages", "live_seqs")] + [(n, ctypes.c_uint64) for n in ("pool_bytes", "table_bytes",
                                                                                                           "free_list_bytes")]


class Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("version", ctypes.c_uint32), ("device", ctypes.c_char_p), ("num_threads", ctypes.c_int32),
                ("communicator", ctypes.c_char_p), ("timeout_ms", ctypes.c_int32), ("rank", ctypes.c_int32), ("world_size", ctypes.c_int32),
                ("nccl_id", ctypes.c_uint8 * 128), ("cuda_stream", ctypes.c_void_p)]


class Sampling(ctypes.Structure):
    _fields_ = [("temperature", ctypes.c_float), ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float), ("seed", ctypes.c_uint64)]


class Decoder:
    def __init__(self, path, device):
        self.lib = ctypes.CDLL(os.path.abspath(path))
        self.lib.sgc_last_error.restype = ctypes.c_char_p
        o = Options(ctypes.sizeof(Options), 1, device.encode(), 0, None, 0, 0, 1)
        self.s = ctypes.c_void_p()
        self.must(self.lib.sgc_session_create(ctypes.byref(o), ctypes.byref(self.s)))
        self.info()

    def must(self, status):
        if status != OK:
            raise RuntimeError("status %d: %s" % (status, self.lib.sgc_last_error().decode()))

    def info(self):
        i = Info()
        self.must(self.lib.sgc_decode_info_get(self.s, ctypes.byref(i)))
        self.vocab = i.vocab
        return i

    def add(self, prompt):
        """(status, seq, logits)"""
        seq, logits = ctypes.c_int32(-1), (ctypes.c_float * self.vocab)()
        st = self.lib.sgc_seq_add(self.s, (ctypes.c_int64 * len(prompt))(*prompt), len(prompt), ctypes.byref(seq), logits)
        return st, seq.value, list(logits)

    def step(self, seqs, tokens):
        """(status, [logits per sequence])"""
        out = (ctypes.c_float * (self.vocab * max(1, len(seqs))))()
        st = self.lib.sgc_decode_step(self.s, len(seqs), (ctypes.c_int32 * len(seqs))(*seqs), (ctypes.c_int64 * len(tokens))(*tokens), out)
        return st, [list(out[i * self.vocab:(i + 1) * self.vocab]) for i in range(len(seqs))]

    def add_greedy(self, prompt, logits=False):
        """(status, seq, next token, logits or None): the next token chosen where the step runs"""
        seq, nxt = ctypes.c_int32(-1), ctypes.c_int64(-1)
        out = (ctypes.c_float * self.vocab)() if logits else None
        st = self.lib.sgc_seq_add_greedy(self.s, (ctypes.c_int64 * len(prompt))(*prompt), len(prompt), ctypes.byref(seq), ctypes.byref(nxt), out)
        return st, seq.value, nxt.value, list(out) if logits else None

    def step_greedy(self, seqs, tokens, logits=False):
        """(status, [next token per sequence], [logits per sequence] or None)"""
        nxt = (ctypes.c_int64 * len(seqs))()
        out = (ctypes.c_float * (self.vocab * len(seqs)))() if logits else None
        st = self.lib.sgc_decode_step_greedy(self.s, len(seqs), (ctypes.c_int32 * len(seqs))(*seqs), (ctypes.c_int64 * len(tokens))(*tokens), nxt, out)
        return st, list(nxt), [list(out[i * self.vocab:(i + 1) * self.vocab]) for i in range(len(seqs))] if logits else None

    def add_sample(self, prompt, sampling):
        """(status, seq, next token): drawn where the step runs by sampling (temperature, top_k, top_p, seed)"""
        seq, nxt = ctypes.c_int32(-1), ctypes.c_int64(-1)
        st = self.lib.sgc_seq_add_sample(self.s, (ctypes.c_int64 * len(prompt))(*prompt), len(prompt), ctypes.byref(Sampling(*sampling)),
                                         ctypes.byref(seq), ctypes.byref(nxt), None)
        return st, seq.value, nxt.value

    def step_sample(self, seqs, tokens, samplings):
        """(status, [next token per sequence]), each drawn by its sampling"""
        nxt = (ctypes.c_int64 * len(seqs))()
        arr = (Sampling * len(seqs))(*[Sampling(*q) for q in samplings])
        st = self.lib.sgc_decode_step_sample(self.s, len(seqs), (ctypes.c_int32 * len(seqs))(*seqs), (ctypes.c_int64 * len(tokens))(*tokens),
                                             arr, nxt, None)
        return st, list(nxt)

    def add_many(self, prompts, samplings=None):
        """(status, seqs, next tokens, [logits per prompt]): sgc_seqs_add, prefilled together"""
        n, flat = len(prompts), [t for q in prompts for t in q]
        seqs, nxt, out = (ctypes.c_int32 * n)(*[-1] * n), (ctypes.c_int64 * n)(), (ctypes.c_float * (self.vocab * n))()
        arr = (Sampling * n)(*[Sampling(*q) for q in samplings]) if samplings else None
        st = self.lib.sgc_seqs_add(self.s, n, (ctypes.c_int64 * max(1, len(flat)))(*flat), (ctypes.c_int32 * n)(*map(len, prompts)), arr, seqs,
                                   nxt, out)
        return st, list(seqs), list(nxt), [list(out[i * self.vocab:(i + 1) * self.vocab]) for i in range(n)]

    def fork(self, seq):
        child = ctypes.c_int32(-1)
        return self.lib.sgc_seq_fork(self.s, seq, ctypes.byref(child)), child.value

    def free(self, seq):
        return self.lib.sgc_seq_free(self.s, seq)

    def length(self, seq):
        n = ctypes.c_int32(-1)
        return self.lib.sgc_seq_length(self.s, seq, ctypes.byref(n)), n.value

    def check(self):
        self.must(self.lib.sgc_kv_check(self.s))


def argmax(v):
    return max(range(len(v)), key=v.__getitem__)


def close(what, got, want, tol=2e-3):
    """Logits equal to PyTorch's within `tol` (float32 arithmetic in another order)."""
    err = max(abs(a - b) for a, b in zip(got, want))
    if not err <= tol:
        raise AssertionError("%s: logits differ from PyTorch's by %g (tolerance %g)" % (what, err, tol))


def expect(what, got, want):
    if got != want:
        raise AssertionError("%s: got %s, expected %s" % (what, got, want))


def join_and_leave(d, ref):
    """Prompt 0 alone, then 1 joins, 0 leaves when done, 2 joins: each must equal its greedy reference."""
    live, out = {}, {}

    def admit(i):
        st, seq, logits = d.add(PROMPTS[i])
        d.must(st)
        close("prompt %d, prefill" % i, logits, ref["logits"][i][0])
        live[i], out[i] = seq, [argmax(logits)]

    def step(n):
        for _ in range(n):
            order = [i for i in sorted(live) if len(out[i]) < NEW]
            if not order:
                return
            st, logits = d.step([live[i] for i in order], [out[i][-1] for i in order])
            d.must(st)
            for i, l in zip(order, logits):
                close("prompt %d, token %d" % (i, len(out[i])), l, ref["logits"][i][len(out[i])])
                out[i].append(argmax(l))
            d.check()

    admit(0)
    step(3)
    admit(1)
    step(NEW - 4)  # prompt 0 is done now
    expect("tokens of prompt 0", out[0], ref["greedy"][0])
    d.must(d.free(live.pop(0)))
    admit(2)
    step(NEW)
    for i in (1, 2):
        expect("tokens of prompt %d" % i, out[i], ref["greedy"][i])
        d.must(d.free(live.pop(i)))
    d.check()
    expect("free pages after all left", d.info().free_pages, d.info().blocks)


def fork(d, ref):
    f = ref["fork"]
    st, parent, logits = d.add(PROMPTS[3])
    d.must(st)
    toks = [argmax(logits)]
    for _ in range(f["k"]):
        st, logits = d.step([parent], [toks[-1]])
        d.must(st)
        toks.append(argmax(logits[0]))
    st, child = d.fork(parent)  # both hold prompt 3 and k tokens; the last page is partly filled
    d.must(st)
    expect("the child's length", d.length(child), (OK, len(PROMPTS[3]) + f["k"]))
    kid = [f["alt"]]
    for _ in range(6):
        st, logits = d.step([parent, child], [toks[-1], kid[-1]])
        d.must(st)
        close("the parent after the fork, token %d" % len(toks), logits[0], ref["logits"][3][len(toks)])
        close("the forked child, token %d" % len(kid), logits[1], f["logits"][len(kid) - 1])
        toks.append(argmax(logits[0]))
        kid.append(argmax(logits[1]))
        d.check()
    expect("the parent after the fork", toks, ref["greedy"][3][:len(toks)])
    expect("the forked child", kid[1:], ref["fork"]["child"])
    d.must(d.free(parent))
    d.must(d.free(child))
    d.check()


def greedy_tokens(d, ref):
    """The greedy tokens chosen where the step runs (no logits come back) are PyTorch's; with the
    logits asked for too, each is their argmax; asking for neither is refused."""
    seqs, toks = [], []
    for i, p in enumerate(PROMPTS):
        st, seq, nxt, logits = d.add_greedy(p, logits=i == 0)
        d.must(st)
        if i == 0:
            expect("the prompt's next token against its logits", nxt, argmax(logits))
        seqs.append(seq)
        toks.append([nxt])
    while len(toks[0]) < NEW:
        st, nxt, logits = d.step_greedy(seqs, [t[-1] for t in toks], logits=len(toks[0]) == 3)
        d.must(st)
        if logits:
            expect("next tokens against their logits", nxt, [argmax(l) for l in logits])
        for t, n in zip(toks, nxt):
            t.append(n)
    expect("greedy tokens from the step", toks, ref["greedy"])
    none = d.lib.sgc_decode_step_greedy(d.s, 1, (ctypes.c_int32 * 1)(seqs[0]), (ctypes.c_int64 * 1)(toks[0][-1]), None, None)
    expect("sgc_decode_step_greedy without next or logits", none, INVALID)
    for q in seqs:
        d.must(d.free(q))
    d.check()


def sampled(d, samplings):
    """The 4 prompts decoded together, NEW tokens each, prompt i drawn by samplings[i]."""
    seqs, toks = [], []
    for p, q in zip(PROMPTS, samplings):
        st, seq, nxt = d.add_sample(p, q)
        d.must(st)
        seqs.append(seq)
        toks.append([nxt])
    while len(toks[0]) < NEW:
        st, nxt = d.step_sample(seqs, [t[-1] for t in toks], samplings)
        d.must(st)
        for t, n in zip(toks, nxt):
            t.append(n)
    for seq in seqs:
        d.must(d.free(seq))
    return toks


def sampled_tokens(work, d, device):
    """Tokens drawn where the step runs: the same seeds draw the same tokens again, top_k 1 is
    greedy, a prompt's draws do not depend on the others' (one temperature 0 among them gives
    PyTorch's greedy tokens); on a GPU the draws are the CPU's. Bad parameters are refused."""
    ref = json.load(open(os.path.join(work, "ref.json")))
    mixed = [(1.0, 0, 1.0, 11), (0.8, 5, 0.9, 12), (0.0, 0, 1.0, 0), (1.3, 0, 0.7, 14)]
    a = sampled(d, mixed)
    expect("sampled tokens, drawn again", sampled(d, mixed), a)
    expect("the greedy row among sampled ones", a[2], ref["greedy"][2])
    expect("top_k 1", sampled(d, [(1.0, 1, 1.0, k) for k in range(4)]), ref["greedy"])
    alone = sampled(d, [(1.0, 0, 1.0, 99), mixed[1], mixed[2], (0.5, 0, 1.0, 98)])
    expect("prompt 1's draws beside other rows", alone[1], a[1])
    if a[0] == ref["greedy"][0] and a[3] == ref["greedy"][3]:
        raise AssertionError("sampling at temperature 1 drew the greedy tokens: it samples nothing")
    if device != "cpu":
        expect("sampled tokens on %s against the cpu's" % device, a, sampled(Decoder(os.path.join(work, "gen.so"), "cpu"), mixed))
    st, seq, logits = d.add(PROMPTS[0])
    d.must(st)
    for bad in [(-1.0, 0, 1.0, 0), (float("nan"), 0, 1.0, 0), (1.0, -1, 1.0, 0), (1.0, 0, 0.0, 0), (1.0, 0, 1.5, 0)]:
        st, _ = d.step_sample([seq], [1], [bad])
        expect("sampling %s" % (bad,), st, INVALID)
        st, _, _ = d.add_sample(PROMPTS[0], bad)
        expect("a prompt's sampling %s" % (bad,), st, INVALID)
    d.must(d.free(seq))
    d.check()


def prefix_sharing(d, ref):
    """A prompt starting with a live sequence's full pages shares them (only its own tokens are
    computed and take pages) and decodes as PyTorch does, also once the first sequence is gone,
    and once every sequence is gone (the pages kept in the cache)."""
    prompts, want = ref["prefix"]["prompts"], ref["prefix"]["greedy"]
    free0 = d.info().free_pages
    st, first, logits = d.add(prompts[0])
    d.must(st)
    free1 = d.info().free_pages
    expect("pages of the first prompt (10 tokens)", free0 - free1, 3)
    seqs, toks = [], []
    for p, shared_pages in ((prompts[1], 2), (prompts[2], 1)):
        before = d.info().free_pages
        st, seq, logits = d.add(p)
        d.must(st)
        d.check()
        expect("new pages of a prompt sharing %d" % shared_pages, before - d.info().free_pages, -(-len(p) // BLOCK) - shared_pages)
        seqs.append(seq)
        toks.append([argmax(logits)])
    d.must(d.free(first))  # the shared pages stay, held by the others
    d.check()
    while len(toks[0]) < NEW:
        st, logits = d.step(seqs, [t[-1] for t in toks])
        d.must(st)
        for t, l in zip(toks, logits):
            t.append(argmax(l))
    d.check()
    expect("prompts decoded over a shared prefix", toks, want[1:])
    for q in seqs:
        d.must(d.free(q))
    expect("pages after all are freed", d.info().free_pages, free0)
    d.check()
    # Freed, the prompts' full pages keep their bytes: the second prompt again shares them (the
    # cached pages are handed out last) and decodes as before.
    st, seq, logits = d.add(prompts[1])
    d.must(st)
    d.check()
    toks = [argmax(logits)]
    while len(toks) < NEW:
        st, logits = d.step([seq], [toks[-1]])
        d.must(st)
        toks.append(argmax(logits[0]))
    expect("a prompt decoded over the cached pages of freed sequences", toks, want[1])
    d.must(d.free(seq))
    expect("pages after all are freed again", d.info().free_pages, free0)
    d.check()


def batched_prefill(d, ref):
    """All prompts added in one call (sgc_seqs_add: their tokens packed into shared steps) give
    PyTorch's logits and next tokens, then decode PyTorch's greedy tokens together."""
    free0 = d.info().free_pages
    st, seqs, nxt, logits = d.add_many(PROMPTS)
    d.must(st)
    d.check()
    for i in range(len(PROMPTS)):
        close("prompt %d, prefilled with the others" % i, logits[i], ref["logits"][i][0])
    expect("each prompt's next token", nxt, [g[0] for g in ref["greedy"]])
    toks = [[t] for t in nxt]
    while len(toks[0]) < NEW:
        st, nxt, _ = d.step_greedy(seqs, [t[-1] for t in toks])
        d.must(st)
        for t, n in zip(toks, nxt):
            t.append(n)
    expect("greedy tokens after a batched prefill", toks, ref["greedy"])
    for q in seqs:
        d.must(d.free(q))
    d.check()
    expect("free pages after all left", d.info().free_pages, free0)


def batched_statuses(d, context):
    """A batch that cannot be added whole adds nothing: slots, pages and lengths are as before."""
    before = (d.info().free_pages, d.info().live_seqs)
    for what, prompts, want in [("a token outside the vocabulary in the second prompt", [[1, 2], [d.vocab]], INVALID),
                                ("an empty second prompt", [[1, 2], []], INVALID),
                                ("a second prompt longer than the context", [[1], [1] * (context + 1)], INVALID),
                                ("more prompts than sequence slots", [[1]] * (d.info().max_seqs + 1), INVALID),
                                ("prompts that together need more pages than are free", [[3] * context] * d.info().max_seqs, OUT_OF_PAGES)]:
        expect("sgc_seqs_add: " + what, d.add_many(prompts)[0], want)
        expect("pages and sequences after a refused batch (%s)" % what, (d.info().free_pages, d.info().live_seqs), before)
        d.check()
    expect("sgc_seqs_add with a bad top_p", d.add_many([[1], [2]], [(1.0, 0, 1.0, 0), (1.0, 0, 0.0, 0)])[0], INVALID)
    expect("sgc_seqs_add of no prompts", d.lib.sgc_seqs_add(d.s, 0, None, None, None, None, None, None), INVALID)


def statuses(d, context):
    expect("free of an unknown sequence", d.free(3), NOT_FOUND)
    expect("fork of an unknown sequence", d.fork(-1)[0], NOT_FOUND)
    expect("length of an unknown sequence", d.length(7)[0], NOT_FOUND)
    expect("step of an unknown sequence", d.step([2], [1])[0], NOT_FOUND)
    expect("a prompt longer than the context", d.add([1] * (context + 1))[0], INVALID)
    expect("an empty prompt", d.add([])[0], INVALID)
    expect("a token outside the vocabulary", d.add([d.vocab])[0], INVALID)
    st, seq, _ = d.add([1, 2])
    d.must(st)
    expect("one sequence twice in a step", d.step([seq, seq], [1, 1])[0], INVALID)
    d.must(d.free(seq))
    expect("a freed sequence", d.step([seq], [1])[0], NOT_FOUND)
    expect("training a decoding library", d.lib.sgc_train_step(d.s, ctypes.byref(ctypes.c_double())), INVALID)
    d.check()


def random_mix(d, rounds, seed):
    """Random add/fork/free/step on a tiny pool; the pages are modelled here and compared."""
    rng = random.Random(seed)
    info = d.info()
    B, blocks, slots, context = info.block_size, info.blocks, info.max_seqs, info.max_context
    pages = {}  # seq -> list of page objects (shared by identity after a fork)
    length = {}
    fresh = iter(range(10 ** 9))
    calls, short = 0, 0  # calls made, and of them out of pages

    def held():
        return len({p for ps in pages.values() for p in ps})

    def append(seq, count):
        n = length[seq]
        if n % B and any(pages[seq][-1] in pages[o] for o in pages if o != seq):
            pages[seq][-1] = next(fresh)
        while len(pages[seq]) < (n + count + B - 1) // B:
            pages[seq].append(next(fresh))
        length[seq] = n + count

    for _ in range(rounds):
        op = rng.choice(["add", "add", "fork", "free", "step", "step", "step"])
        if op == "add":
            n = rng.randint(1, context)
            st, seq, _ = d.add([rng.randrange(d.vocab) for _ in range(n)])
            fits = len(pages) < slots and (n + B - 1) // B <= blocks - held()
            expect("add of %d tokens (status)" % n, st, OK if fits else OUT_OF_PAGES)
            if st == OK:
                pages[seq], length[seq] = [], 0
                append(seq, n)
        elif op == "fork" and pages:
            seq = rng.choice(sorted(pages))
            st, child = d.fork(seq)
            expect("fork (status)", st, OK if len(pages) < slots else OUT_OF_PAGES)
            if st == OK:
                pages[child], length[child] = list(pages[seq]), length[seq]
        elif op == "free" and pages:
            seq = rng.choice(sorted(pages))
            d.must(d.free(seq))
            del pages[seq], length[seq]
        elif op == "step" and pages:
            seqs = [s for s in sorted(pages) if length[s] < context and rng.random() < 0.8]
            if not seqs:
                continue
            # The step appends to each sequence in turn; it fits when the pages then held do.
            saved = {s: list(p) for s, p in pages.items()}, dict(length)
            for s in seqs:
                append(s, 1)
            fits = held() <= blocks
            st, _ = d.step(seqs, [rng.randrange(d.vocab) for _ in seqs])
            expect("step of %d sequences (status)" % len(seqs), st, OK if fits else OUT_OF_PAGES)
            if st != OK:
                pages, length = saved
        else:
            continue
        calls, short = calls + 1, short + (op != "free" and st == OUT_OF_PAGES)
        d.check()
        expect("free pages", d.info().free_pages, blocks - held())
        expect("live sequences", d.info().live_seqs, len(pages))
        for s in pages:
            expect("length of sequence %d" % s, d.length(s), (OK, length[s]))
    for s in sorted(pages):
        d.must(d.free(s))
    d.check()
    expect("free pages at the end", d.info().free_pages, blocks)
    return calls, short


def teacher_forced(d, ref):
    """All prompts together, fed PyTorch's greedy tokens: the logits of every step, per prompt."""
    seqs, out = [], [[] for _ in PROMPTS]
    for i, p in enumerate(PROMPTS):
        st, seq, logits = d.add(p)
        d.must(st)
        seqs.append(seq)
        out[i].append(logits)
    for t in range(NEW - 1):
        st, logits = d.step(seqs, [ref["greedy"][i][t] for i in range(len(PROMPTS))])
        d.must(st)
        for i, l in enumerate(logits):
            out[i].append(l)
    for seq in seqs:
        d.must(d.free(seq))
    return out


def bf16_heads64(work, device):
    """gen64.so (bf16 cache, heads of 64): on the CPU against PyTorch's float32 logits (within
    the cache's rounding); on a GPU, where the warp-per-head kernel runs, against the CPU's."""
    ref = json.load(open(os.path.join(work, "ref.json")))["bf16"]
    lib = os.path.join(work, "gen64.so")
    cpu = teacher_forced(Decoder(lib, "cpu"), ref)
    # Relative to each step's largest logit: the cache keeps 8 bits of each key and value.
    worst = max(max(abs(a - b) for a, b in zip(got, want)) / max(map(abs, want))
                for i in range(len(PROMPTS)) for got, want in zip(cpu[i], ref["logits"][i]))
    if not worst < 0.015:
        raise AssertionError("bf16 logits on the CPU differ from PyTorch's float32 ones by %.1f%% of the largest" % (100 * worst))
    msg = "bf16 cache, heads of 64: cpu within %.2f%% of PyTorch's float32 logits" % (100 * worst)
    if device != "cpu":
        # The device computes the keys and values in another order (its products are GEMMs over the
        # step's tokens), so a few round to the other neighbouring bf16 value than on the CPU: a
        # difference of up to one bf16 rounding step (2^-8) of the largest logit.
        dev = teacher_forced(Decoder(lib, device), ref)
        worst, where = 0.0, None
        for i in range(len(PROMPTS)):
            for t, (got, want) in enumerate(zip(dev[i], cpu[i])):
                err = max(abs(a - b) for a, b in zip(got, want)) / max(map(abs, want))
                if err > worst:
                    worst, where = err, (i, t)
        if not worst < 2 ** -8:
            raise AssertionError("bf16 cache, prompt %d, token %d, %s against cpu: logits differ by %.2g of the largest" % (where + (device, worst)))
        msg += "; %s within %.2g of the largest logit of cpu's" % (device, worst)
    print(msg)


def all_bf16(work, device):
    """gen64 with --precision bf16: its weights embedded, or loaded from float32 safetensors, give
    the same logits; both within bf16's rounding of PyTorch's float32 ones."""
    ref = json.load(open(os.path.join(work, "ref.json")))["bf16"]
    embedded = Decoder(os.path.join(work, "gen64_bf16_embedded.so"), device)
    loaded = Decoder(os.path.join(work, "gen64_bf16_none.so"), device)
    loaded.must(loaded.lib.sgc_load(loaded.s, os.path.join(work, "gpt64.safetensors").encode()))
    a, b = teacher_forced(embedded, ref), teacher_forced(loaded, ref)
    expect("logits with the weights embedded and loaded", a, b)
    worst = max(max(abs(x - y) for x, y in zip(got, want)) / max(map(abs, want))
                for i in range(len(PROMPTS)) for got, want in zip(a[i], ref["logits"][i]))
    if not worst < 0.06:
        raise AssertionError("bf16 logits differ from PyTorch's float32 ones by %.1f%% of the largest" % (100 * worst))
    print("all bf16, heads of 64, %s: weights embedded = loaded; within %.1f%% of PyTorch's float32 logits" % (device, 100 * worst))


def check(work, device, sgc=None):
    ref = json.load(open(os.path.join(work, "ref.json")))
    d = Decoder(os.path.join(work, "gen.so"), device)
    i = d.info()
    print("gen.so: %d layers, %d pages of %d tokens (%d bytes), tables %d bytes, free list %d bytes" %
          (i.layers, i.blocks, i.block_size, i.pool_bytes, i.table_bytes, i.free_list_bytes))
    join_and_leave(d, ref)
    print("join and leave: ok")
    fork(d, ref)
    print("fork: ok")
    prefix_sharing(d, ref)
    print("prefix sharing: ok")
    greedy_tokens(d, ref)
    print("greedy tokens on the device: ok")
    sampled_tokens(work, d, device)
    print("sampled tokens on the device: ok")
    statuses(d, i.max_context)
    print("statuses: ok")
    batched_prefill(d, ref)
    print("batched prefill: ok")
    b = Decoder(os.path.join(work, "buckets.so"), device)
    batched_prefill(b, ref)
    join_and_leave(b, ref)
    fork(b, ref)
    greedy_tokens(b, ref)
    print("token buckets (a step of %d tokens, buckets of 1 and 4): batched prefill, join and leave, fork, greedy: ok" % b.info().tokens_per_step)
    small = Decoder(os.path.join(work, "small.so"), device)
    batched_statuses(small, SMALL["context"])
    print("batched statuses: ok")
    calls, short = random_mix(small, 400, 1)
    print("random add/fork/free/step on %d pages: ok (%d calls, %d out of pages)" % (small.info().blocks, calls, short))
    if short == 0:
        raise AssertionError("the random mix never ran out of pages: it tests too little")
    # The cache was churned: a fresh sequence still decodes as PyTorch does.
    st, seq, logits = small.add(PROMPTS[0])
    small.must(st)
    toks = [argmax(logits)]
    while len(toks) < NEW:
        st, logits = small.step([seq], [toks[-1]])
        small.must(st)
        toks.append(argmax(logits[0]))
    expect("prompt 0 after the random mix", toks, ref["greedy"][0])
    print("after the mix: ok")
    bf16_heads64(work, device)
    all_bf16(work, device)
    if sgc:
        shown = subprocess.run([sgc, "inspect", os.path.join(work, "gen.so")], check=True, capture_output=True, text=True).stdout
        for words in ["page pool %16s bytes" % "{:,}".format(i.pool_bytes), "block tables %16s bytes" % "{:,}".format(i.table_bytes)]:
            if " ".join(words.split()) not in " ".join(shown.split()):
                raise AssertionError("sgc inspect gen.so does not show '%s':\n%s" % (words, shown))
        print("sgc inspect: ok")
        cmd = [sgc, "generate", os.path.join(work, "small.so"), "--max-new-tokens", str(NEW), "--device", device]
        for p in PROMPTS:
            cmd += ["--prompt-ids", ",".join(map(str, p))]
        lines = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()
        got = [json.loads(line)["ids"] for line in lines]
        expect("sgc generate (4 prompts on a 10-page cache: some wait, some are preempted)", got, ref["greedy"])
        print("sgc generate: ok")
        cmd[2] = os.path.join(work, "cachepos.so")
        got = [json.loads(line)["ids"] for line in subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()]
        expect("sgc generate, positions from the cache's length", got, ref["greedy"])
        print("positions from the cache's length: ok")


def main():
    if sys.argv[1] == "prepare":
        prepare(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
    else:
        prepare(sys.argv[2], sys.argv[3])
        check(sys.argv[3], "cpu", sys.argv[2])


if __name__ == "__main__":
    main()
