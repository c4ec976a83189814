# The Python package (python/sgc): installed offline with pip into a folder of its own and
# imported from there, it compiles the bundled sample, trains it to the same losses as `sgc train`
# (numpy batches, and torch CPU tensors through DLPack), hands out and takes back the
# parameters, writes checkpoints, and turns every ABI failure into an SgcError with the library's
# message.
# Usage: test_package.py SGC SOURCE_DIR
import json, math, os, shutil, subprocess, sys, tempfile

sgc_bin, src = sys.argv[1], sys.argv[2]
work = tempfile.mkdtemp()
site = os.path.join(work, "site")
shutil.copytree(os.path.join(src, "python"), os.path.join(work, "python"), ignore=shutil.ignore_patterns("__pycache__"))  # setuptools builds in place
pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--quiet", "--target", site,
                      os.path.join(work, "python")], capture_output=True, text=True)
assert pip.returncode == 0, pip.stdout + pip.stderr
sys.path.insert(0, site)
sys.path.insert(0, os.path.join(src, "tests", "pyutil"))
import numpy as np
import sgc
import st
try:
    import torch  # Debian's, when present: tensors through DLPack, views shared with torch
except ImportError:
    torch = None

assert os.path.dirname(sgc.__file__) == os.path.join(site, "sgc"), sgc.__file__  # the installed copy
data_path = os.path.join(src, "samples", "mlp_train_data.safetensors")
data = st.read(data_path)
batch = lambda i: {k: v[i % v.shape[0]] for k, v in data.items()}


def zeroed_fc1(s):
    """The eval loss with mlp.fc1.weight zeroed through load_state_dict (the reference for a write through a view)."""
    saved = s.state_dict()
    s.load_state_dict({"mlp.fc1.weight": np.zeros_like(saved["mlp.fc1.weight"])})
    loss = s.eval_step(**batch(0))
    s.load_state_dict(saved)
    return loss
so = sgc.compile(os.path.join(src, "samples", "mlp_train.onnx"), os.path.join(work, "train.so"), sgc=sgc_bin, optimizer="adamw",
                 lr=1e-2, target="cpu")
lib = sgc.load(so)
out = subprocess.run([sgc_bin, "train", so, "--data", data_path, "--steps", "5"], capture_output=True, text=True, check=True).stdout
want = [json.loads(line)["loss"] for line in out.splitlines()]

# The same losses as sgc train (it prints 9 significant digits), from numpy batches.
with lib.session() as s:
    assert s.inputs() == {"x": ("float32", (32, 16)), "labels": ("int64", (32,))}, s.inputs()
    plan = subprocess.run([sgc_bin, "inspect", so], capture_output=True, text=True, check=True).stdout
    assert f"memory plan: {s.memory_plan_bytes():,} bytes" in plan, (s.memory_plan_bytes(), plan[:400])
    got = [s.step(**batch(i)) for i in range(5)]
    assert [float(f"{x:.9g}") for x in got] == want, (got, want)
    # Parameters out and back in: the checkpoint's values; zeroed weights change the loss, restored ones restore it.
    params = s.state_dict()
    assert sorted(params) == sorted(s.parameter_names()) and params, params.keys()
    s.save(os.path.join(work, "ck.safetensors"))
    ck = st.read(os.path.join(work, "ck.safetensors"))
    assert all(np.array_equal(ck[k], v) for k, v in params.items())
    full = s.state_dict(state=True)
    assert len(full) > len(params) and "sgc.step" in full and int(full["sgc.step"]) == 5, sorted(full)
    s.trace_next_step(os.path.join(work, "trace.json"))
    before = s.eval_step(**batch(0))
    assert any(e["ph"] == "X" for e in json.load(open(os.path.join(work, "trace.json")))["traceEvents"])
    s.load_state_dict({k: np.zeros_like(v) for k, v in params.items()})
    zeroed = s.eval_step(**batch(0))
    s.load_state_dict(params)
    assert zeroed != before and s.eval_step(**batch(0)) == before, (before, zeroed)
    # Views without copies: a torch-side write is what the next step reads, and the step's update shows in the view.
    views = s.parameters()
    assert sorted(views) == sorted(params) and all(np.array_equal(views[k], v) for k, v in params.items())
    if torch is not None:
        w = torch.from_numpy(views["mlp.fc1.weight"])
        w.zero_()
        assert s.eval_step(**batch(0)) == zeroed_fc1(s), "a write through the view was not seen"
        s.load_state_dict(params)
        # The same through DLPack (what a GPU session's parameters() are made of): shared, and a
        # capsule nobody takes lets the session go (sgc._tensors keeps nothing for it).
        d = torch.from_dlpack(s.dlpack("mlp.fc1.weight"))
        assert d.data_ptr() == views["mlp.fc1.weight"].ctypes.data and torch.equal(d, torch.from_numpy(params["mlp.fc1.weight"]))
        d.zero_()
        assert s.eval_step(**batch(0)) == zeroed_fc1(s), "a write through the DLPack view was not seen"
        s.load_state_dict(params)
        lent = len(sgc._tensors._lent)
        del d
        s.dlpack("mlp.fc1.weight")  # dropped unconsumed
        assert len(sgc._tensors._lent) == lent - 1, (lent, len(sgc._tensors._lent))
    s.step(**batch(0))
    assert not np.array_equal(views["mlp.fc1.weight"], params["mlp.fc1.weight"]), "the step's update did not show in the view"
    s.load_state_dict(params)
    # Errors carry the ABI's own words.
    checks = [(lambda: s.step(x=np.zeros((3, 16), np.float32)), "input 'x'", 3),
              (lambda: s.step(nope=np.zeros(3, np.float32)), "nope", 2),
              (lambda: s.load(os.path.join(work, "missing.safetensors")), "missing.safetensors", 6)]
    for call, text, status in checks:
        try:
            call()
            raise AssertionError(f"no error for {text}")
        except sgc.SgcError as e:
            assert text in str(e) and e.status == status, (str(e), e.status)
    try:
        s.step(x=np.zeros((16, 32), np.float32).T)
        raise AssertionError("a transposed array was taken")
    except TypeError as e:
        assert "not contiguous" in str(e), e
try:
    s.step(**batch(0))
    raise AssertionError("a closed session stepped")
except sgc.SgcError as e:
    assert "closed" in str(e), e

# A second session resumes from the checkpoint: step 5 gives sgc train's sixth loss.
out6 = subprocess.run([sgc_bin, "train", so, "--data", data_path, "--steps", "6"], capture_output=True, text=True, check=True).stdout
with lib.session() as s:
    s.load(os.path.join(work, "ck.safetensors"))
    assert float(f"{s.step(**batch(5)):.9g}") == json.loads(out6.splitlines()[5])["loss"]

# torch CPU tensors through __dlpack__ (Debian's torch, when present): the same losses.
if torch is not None:
    with lib.session() as s:
        got = [s.step(**{k: torch.from_numpy(np.array(v)) for k, v in batch(i).items()}) for i in range(5)]
    assert [float(f"{x:.9g}") for x in got] == want, (got, want)

# Decoding (tests/decode's small decoder over a 10-page cache of 3 slots, so that sequences wait):
# greedy generate gives sgc generate's tokens; sampling is reproducible by its seed, top_k=1 is
# greedy; a fork decodes like its parent; no page is left behind.
decoded = "skipped"
if torch is not None:
    dec = os.path.join(work, "dec.onnx")
    subprocess.run([sys.executable, os.path.join(src, "tests", "decode", "gpt_decoder.py"), "export", dec, "0", "test"], check=True,
                   capture_output=True)
    gen = sgc.compile(dec, os.path.join(work, "gen.so"), sgc=sgc_bin, mode="decode", kv_block_size=8, max_seqs=3, max_context=64,
                      kv_blocks=10, max_tokens=4, target="cpu")
    prompts = [[1, 2, 3], [7, 8, 9, 10, 11], [5], [4] * 10]
    cli = subprocess.run([sgc_bin, "generate", gen, "--max-new-tokens", "20"] + [a for p in prompts for a in ("--prompt-ids", ",".join(map(str, p)))],
                         capture_output=True, text=True, check=True).stdout
    want_ids = [json.loads(line)["ids"] for line in cli.splitlines()]
    with sgc.load(gen).session() as s:
        assert s.generate(prompts, 20) == want_ids, (s.generate(prompts, 20), want_ids)
        sampled = s.generate(prompts[:2], 10, temperature=1.0, top_k=20, top_p=0.9, seed=7)
        assert sampled == s.generate(prompts[:2], 10, temperature=1.0, top_k=20, top_p=0.9, seed=7) and sampled != want_ids[:2]
        assert s.generate(prompts[:1], 10, temperature=1.0, top_k=1) == [want_ids[0][:10]]
        # The draws are sgc generate's, and a prompt's do not depend on what else the steps run.
        flags = ["--temperature", "1", "--top-k", "20", "--top-p", "0.9", "--seed", "7"]
        cli = subprocess.run([sgc_bin, "generate", gen, "--max-new-tokens", "10"] + flags +
                             [a for p in prompts[:2] for a in ("--prompt-ids", ",".join(map(str, p)))], capture_output=True, text=True, check=True).stdout
        assert sampled == [json.loads(line)["ids"] for line in cli.splitlines()], (sampled, cli)
        assert s.generate(prompts[:1], 10, temperature=1.0, top_k=20, top_p=0.9, seed=7) == sampled[:1]
        # Over many draws at one step (seeds 0..3999, the prompt's pages shared after the first),
        # the frequencies fit softmax(logits / 0.7) over the top 8 (chi-square, p = 0.001).
        seq, logits = s.add(prompts[1])
        s.free(seq)
        order = sorted(range(len(logits)), key=lambda v: -logits[v])[:8]
        w = [math.exp((logits[v] - logits[order[0]]) / 0.7) for v in order]
        counts = dict.fromkeys(order, 0)
        for k in range(4000):
            seq, nxt = s.add(prompts[1], sample={"temperature": 0.7, "top_k": 8, "seed": k})
            s.free(seq)
            counts[nxt] += 1  # a token outside the top 8 fails here
        chi2 = sum((counts[v] - 4000 * x / sum(w)) ** 2 / (4000 * x / sum(w)) for v, x in zip(order, w))
        assert chi2 < 24.32, (chi2, counts, w)
        for bad, what in (({"temperature": -1.0}, "temperature"), ({"top_k": -2}, "top_k"), ({"top_p": 0.0}, "top_p")):
            try:
                s.decode([0], [1], sample=bad)
                raise AssertionError(f"took {bad}")
            except sgc.SgcError as e:
                assert what in str(e) and e.status == 1, e
        seq, logits = s.add(prompts[0])
        child = s.fork(seq)
        a, b = s.decode([seq, child], [want_ids[0][0]] * 2)
        assert a == b and s.length(child) == len(prompts[0]) + 1
        rows = s.decode([seq, child], [want_ids[0][1]] * 2, out=np.empty((2, len(a)), np.float32))  # into the caller's array
        assert rows.shape == (2, len(a)) and np.array_equal(rows[0], rows[1]) and int(rows[0].argmax()) == want_ids[0][2], rows[:, :4]
        s.free(seq), s.free(child)
        info = s.decode_info()
        assert info["live_seqs"] == 0 and info["free_pages"] == info["blocks"], info
    decoded = (f"generate equal to sgc generate ({sum(map(len, want_ids))} tokens), sampling reproducible and sgc generate's, "
               f"4000 draws fit the softmax (chi-square {chi2:.1f}), fork")

# Communicator options: a malformed NCCL id is refused before the library sees it.
try:
    lib.session(communicator="nccl", nccl_id=b"short")
    raise AssertionError("took a 5-byte NCCL id")
except sgc.SgcError as e:
    assert "expected 128" in str(e), e

# A failed compile says why.
try:
    sgc.compile(os.path.join(work, "absent.onnx"), os.path.join(work, "x.so"), sgc=sgc_bin)
    raise AssertionError("compiled a missing model")
except sgc.SgcError as e:
    assert "absent.onnx" in str(e), e

for f in (sgc.compile, sgc.load, sgc.Library.session, sgc.Session.step, sgc.Session.eval_step, sgc.Session.state_dict,
          sgc.Session.load_state_dict, sgc.Session.save, sgc.Session.load, sgc.Session.set_lr, sgc.Session.trace_next_step,
          sgc.Session.generate, sgc.Session.add, sgc.Session.fork, sgc.Session.free, sgc.Session.decode, sgc.SgcError):
    assert f.__doc__ and len(f.__doc__) > 20, f
shutil.rmtree(work)
print(f"python package: installed offline, 5 steps equal to sgc train's, torch tensors {'too' if torch else 'skipped'}, "
      f"parameters and checkpoints round-trip, {len(checks) + 2} errors as SgcError/TypeError; decoding: {decoded}")
