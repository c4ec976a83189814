# Checkpoints between sgc and PyTorch, by the state_dict's names: for GPT-2 (its tied embedding
# and head) and ResNet-18 (BatchNorm's running statistics), compiled from their TorchScript
# archives.
#   sgc -> PyTorch: the library trains K steps and saves a safetensors checkpoint; the PyTorch
#     model loads it with load_state_dict and its loss on batch K is sgc's next loss; AdamW takes
#     the checkpoint's moments (NAME.exp_avg, NAME.exp_avg_sq, sgc.step), and after one more step
#     on each side the losses on batch K + 1 agree: training continues as it would have.
#   PyTorch -> sgc: PyTorch trains K AdamW steps and saves its state_dict as safetensors; the
#     library loads it (names it lacks left out: tied aliases, num_batches_tracked) and its loss on
#     batch K is PyTorch's next loss.
# PyTorch's model is the library's own (Hugging Face / torchvision, seeded as export_models.py
# builds them) where transformers and torchvision are installed (the GPU machine), else the
# archive loaded by torch.jit.load; safetensors files are read and written by the safetensors
# package where it is installed, else by tests/pyutil/st.py.
# Usage: checkpoint_torch.py build SGC WORK OUT    (compile the libraries into OUT, with their data;
#                                                   WORK: the fixtures, unpacked there when absent)
#        checkpoint_torch.py check OUT [DEVICE]     (the round trips; DEVICE cpu or cuda:0)
#        checkpoint_torch.py ci SGC WORK            (both, on the CPU: CI runs this)
import json, os, shutil, subprocess, sys, zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "..", "python"), os.path.join(HERE, "..", "pyutil"), HERE]
MODELS, K = ["gpt2", "resnet18"], 3


def build(sgc, work, out):
    """Compiles each model's TorchScript archive (unpacked in WORK by train_models.py) into OUT."""
    os.makedirs(out, exist_ok=True)
    import fixtures
    import st
    for name in MODELS:
        if not os.path.exists(os.path.join(work, name + ".json")):
            fixtures.unpack(os.path.join(HERE, "fixtures", name + ".tar.xz"), work)
        if not any(f.startswith(name + ".torch-") and f.endswith(".pt") for f in os.listdir(work)):
            fixtures.unpack(os.path.join(HERE, "fixtures", "torchscript-1.13.tar.xz"), work)
        info = json.load(open(os.path.join(work, name + ".json")))
        pt = next(os.path.join(work, f) for f in sorted(os.listdir(work)) if f.startswith(name + ".torch-") and f.endswith(".pt"))
        facts = json.load(open(pt[:-3] + ".json"))
        data = st.read(os.path.join(work, name + ".data.safetensors"))
        batches = {k: data[k] for k in facts["inputs"]}
        flags = ["--optimizer", "adamw", "--lr", str(info["lr"]), "--weight-decay", str(info["weight_decay"])]
        if not any(n.endswith("/traced_inputs.pkl") for n in zipfile.ZipFile(pt).namelist()):
            types = {"int64": "i64", "float32": "f32"}
            flags += ["--input-type", ",".join(f"{k}={types[str(v.dtype)]}[{','.join(map(str, v.shape[1:]))}]" for k, v in batches.items())]
        target = ["--target", "cpu,sm_90", "--precision", "bf16"] if os.environ.get("SGC_CHECKPOINT_GPU") else ["--target", "cpu"]
        subprocess.run([sgc, "compile", pt, "-o", os.path.join(out, name + ".so")] + flags + target, check=True)
        shutil.copy(pt, os.path.join(out, name + ".pt"))
        st.write(os.path.join(out, name + ".batches.safetensors"), batches)
        json.dump({"lr": info["lr"], "weight_decay": info["weight_decay"], "inputs": facts["inputs"]}, open(os.path.join(out, name + ".json"), "w"))


def safetensors_io():
    """(read, write) of {name: torch tensor} files: the safetensors package's, or st.py's."""
    import torch
    try:
        from safetensors.torch import load_file, save_file
        # save_file refuses tensors that share memory (a tied embedding and head): each is written apart.
        return load_file, lambda path, d: save_file({k: v.detach().clone().contiguous() for k, v in d.items()}, path), "safetensors"
    except ImportError:
        import st
        return (lambda path: {k: torch.from_numpy(v.copy()) for k, v in st.read(path).items()},
                lambda path, d: st.write(path, {k: v.detach().cpu() for k, v in d.items()}), "tests/pyutil/st.py")


def torch_model(name, out):
    """PyTorch's model at its initial weights: the library's own where its libraries are installed."""
    import torch
    try:
        import export_models as em
        torch.manual_seed(0)
        model, _ = em.MODELS[name]()
        return model.train(), "its own " + type(getattr(model, "m", model)).__name__
    except ImportError:
        return torch.jit.load(os.path.join(out, name + ".pt")).train(), "torch.jit.load of its archive"


def check(out, device):
    import torch
    import sgc
    read, write, io = safetensors_io()
    failed = 0
    for name in MODELS:
        meta = json.load(open(os.path.join(out, name + ".json")))
        batches = {k: torch.from_numpy(v.copy()) for k, v in __import__("st").read(os.path.join(out, name + ".batches.safetensors")).items()}
        batch = lambda i: {k: v[i % v.shape[0]].contiguous() for k, v in batches.items()}
        tol = 1e-5 if device == "cpu" else 2e-2  # bf16 on the GPU
        lib = sgc.load(os.path.join(out, name + ".so"))
        # sgc -> PyTorch
        ck = os.path.join(out, name + ".sgc.safetensors")
        with lib.session(device=device) as s:
            for i in range(K):
                s.step(**batch(i))
            s.save(ck)
            sgc_next = s.step(**batch(K))
            sgc_after = s.eval_step(**batch(K + 1))
        model, which = torch_model(name, out)
        state = read(ck)
        own = model.state_dict()
        result = model.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)
        left = sorted(k for k in state if k not in own)
        moments = [k for k in left if k.endswith((".exp_avg", ".exp_avg_sq"))]
        aliases = [k for k in result.missing_keys if not k.endswith("num_batches_tracked")]
        ok = sorted(moments + ["sgc.step"]) == left and all(k in ("m.lm_head.weight",) for k in aliases)
        opt = torch.optim.AdamW(model.parameters(), lr=meta["lr"], weight_decay=meta["weight_decay"])
        for n, p in model.named_parameters():
            opt.state[p] = {"step": torch.tensor(float(state["sgc.step"].item())), "exp_avg": state[n + ".exp_avg"].clone(),
                            "exp_avg_sq": state[n + ".exp_avg_sq"].clone()}
        loss = model(*batch(K).values())
        torch_next = loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            torch_after = model(*batch(K + 1).values()).item()
        d1 = max(abs(torch_next - sgc_next) / abs(sgc_next), abs(torch_after - sgc_after) / abs(sgc_after))
        # PyTorch -> sgc
        model, _ = torch_model(name, out)
        opt = torch.optim.AdamW(model.parameters(), lr=meta["lr"], weight_decay=meta["weight_decay"])
        for i in range(K):
            loss = model(*batch(i).values())
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            torch_next2 = model(*batch(K).values()).item()
        tck = os.path.join(out, name + ".torch.safetensors")
        write(tck, model.state_dict())
        with lib.session(device=device) as s:
            missing, unexpected = s.load_state_dict(read(tck), strict=False)
            sgc_next2 = s.eval_step(**batch(K))
        ok = ok and not missing and all(k.endswith("num_batches_tracked") or k == "m.lm_head.weight" for k in unexpected)
        d2 = abs(sgc_next2 - torch_next2) / abs(torch_next2)
        ok = ok and d1 <= tol and d2 <= tol
        failed += not ok
        print(f"{name:10s} {'ok' if ok else 'FAILED'}  PyTorch ({which}) on sgc's checkpoint after {K} steps: next loss {torch_next:.6f} vs sgc {sgc_next:.6f}, "
              f"after one more step {torch_after:.6f} vs {sgc_after:.6f} ({d1:.1e}); sgc on PyTorch's: {sgc_next2:.6f} vs {torch_next2:.6f} ({d2:.1e}); {len(moments)} moments into AdamW, "
              f"of PyTorch's: {unexpected[:2]}{'...' if len(unexpected) > 2 else ''} ({io}, {device})", flush=True)
    return failed


def main():
    if sys.argv[1] == "build":
        return build(*sys.argv[2:5])
    if sys.argv[1] == "ci":
        build(sys.argv[2], sys.argv[3], os.path.join(sys.argv[3], "checkpoints"))
        sys.exit(1 if check(os.path.join(sys.argv[3], "checkpoints"), "cpu") else 0)
    sys.exit(1 if check(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "cpu") else 0)


if __name__ == "__main__":
    main()
