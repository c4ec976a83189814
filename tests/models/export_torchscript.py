# Saves the real-model suite (export_models.py's models, weights and batches) as
# TorchScript archives: torch.jit.trace of each model's loss wrapper, in training
# mode, saved with torch.jit.save by the torch that runs this script (2.11 on the
# GPU machine, 1.13 here). The losses to match are export_models.py's, in NAME.json:
# the same seeds give the same weights, and this script checks that the traced
# module's first loss is that reference's first loss.
# For each model NAME it writes OUTDIR/NAME.torch-VERSION.pt and
# OUTDIR/NAME.torch-VERSION.json (the first loss, eager and traced; the parameters).
# With --eager-attention the Hugging Face models attend through their eager implementation
# (matmul, softmax) instead of scaled_dot_product_attention, which torch 1.13 lacks: such an
# archive (NAME.torch-VERSION.eager.pt) loads in torch 1.13, and resave_torchscript.py saves it
# again with 1.13's writer.
# Usage: python3 export_torchscript.py OUTDIR [--eager-attention] [NAME ...]
import json, os, sys, traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_models as em  # noqa: E402

SUITE = ["gpt2", "llama", "bert", "t5", "resnet18", "mobilenet_v3"]


def main():
    out = sys.argv[1]
    eager = "--eager-attention" in sys.argv
    names = [a for a in sys.argv[2:] if not a.startswith("--")]
    os.makedirs(out, exist_ok=True)
    version = torch.__version__.split("+")[0] + (".eager" if eager else "")
    for name in names or SUITE:
        torch.manual_seed(0)
        model, make_batches = em.MODELS[name]()
        for sub in model.modules():  # T5's stacks hold copies of the config
            config = getattr(sub, "config", None)
            if eager and config is not None:
                config._attn_implementation = "eager"
        model.train()
        batches = make_batches(torch.Generator().manual_seed(1))
        b = batches[0]
        info = {"model": name, "torch": torch.__version__, "inputs": list(b),
                "parameters": [n for n, _ in model.named_parameters()]}
        path = os.path.join(out, f"{name}.torch-{version}.pt")
        try:
            info["eager_first_loss"] = model(**b).item()
            traced = torch.jit.trace(model, tuple(b.values()), check_trace=False)
            info["traced_first_loss"] = traced(*b.values()).item()
            torch.jit.save(traced, path)
            info["bytes"] = os.path.getsize(path)
        except Exception:
            info["error"] = traceback.format_exc()[-1500:]
        with open(os.path.join(out, f"{name}.torch-{version}.json"), "w") as f:
            json.dump(info, f, indent=1, sort_keys=True)
        print(name, info.get("error", "ok %.6f %.6f" % (info["eager_first_loss"], info["traced_first_loss"])), flush=True)


if __name__ == "__main__":
    main()
