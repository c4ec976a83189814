# PyTorch's own bf16 mixed precision on the real-model suite, on the GPU:
# each model of export_models.py, built from the same seed (so with the
# weights and batches its fixtures hold), trained 10 AdamW steps on cuda:0
# in float32 and under torch.autocast(bfloat16). How far PyTorch's own bf16
# losses move from its float32 ones is the yardstick check_gpu_models.py
# holds sgc's bf16 libraries to where a network's training is chaotic.
# Runs on the GPU machine (torch 2.11, transformers, torchvision).
# Usage: python3 torch_bf16.py OUT.json [NAME ...]
import json, os, sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_models as em  # noqa: E402


def losses(model, batches, lr, bf16):
    model = model.cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=em.WEIGHT_DECAY)
    out = []
    for i in range(em.STEPS):
        b = {k: v.cuda() for k, v in batches[i % len(batches)].items()}
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**b)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "models": {}}
    for name in sys.argv[2:] or [m for m in em.MODELS if m != "dropout_mlp"]:
        runs = {}
        for bf16 in (False, True):
            torch.manual_seed(0)
            model, make_batches = em.MODELS[name]()
            batches = make_batches(torch.Generator().manual_seed(1))
            lr = em.CNN["lr"] if make_batches is em.cnn_batches else em.LR
            runs["bf16" if bf16 else "f32"] = losses(model, batches, lr, bf16)
        dev = max(abs(a - b) / abs(b) for a, b in zip(runs["bf16"], runs["f32"]))
        result["models"][name] = {"losses_cuda_f32": runs["f32"], "losses_cuda_bf16": runs["bf16"], "bf16_vs_f32": dev}
        print(f"{name:16s} PyTorch bf16 autocast vs float32 on the GPU: max relative loss difference {dev:.2e}", flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
