# The decoding benchmark's Hugging Face model, exported as users export it: GPT2LMHeadModel at
# GPT-2 small's configuration (random weights, seed 0, dropout 0; every parameter then moved by
# noise of 0.02, as training would, so that no two are equal: the exporter merges equal
# initializers, freshly initialized layer norms and biases among them) as a plain causal LM
# (input_ids -> logits, no cache) by torch 2.11's default (dynamo) exporter at opset 18.
# Runs on the GPU machine (transformers is there). The weights stay behind: OUTDIR gets the
# graph alone, its parameters marked as external data in one file (hf_gpt2.onnx.data, not
# written), so that the graph (a few hundred kB) comes back to be compiled with --weights none;
# the benchmark loads the same model's state_dict on the device. Constants that are not
# parameters stay in the graph.
#   python3 bench/export_hf_gpt2.py OUTDIR
# Then, where sgc is built: bench/gpu_decode_build.sh makes hf_gpt2.so from OUTDIR/hf_gpt2.onnx.
import json, os, sys

import onnx
import torch
from onnx import external_data_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "decode"))
from export_hf_decoders import Logits  # noqa: E402  the tests' wrapper: input_ids in, logits out, no cache

DATA = "hf_gpt2.onnx.data"


def model():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).eval()
    noise = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=noise) * 0.02)
    return m


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    m = model()
    full = os.path.join(out, "full.onnx")
    d = torch.export.Dim
    torch.onnx.export(Logits(m), (torch.tensor([[5, 17, 300, 42]]),), full, dynamo=True, opset_version=18, external_data=True,
                      input_names=["input_ids"], output_names=["logits"],
                      dynamic_shapes={"input_ids": {0: d("batch", max=64), 1: d("seq", max=1024)}})
    g = onnx.load(full)  # with its data
    params = {"m." + k for k in m.state_dict()} | set(m.state_dict())
    offset, marked = 0, []
    for t in g.graph.initializer:
        if t.name not in params:
            continue
        size = len(t.raw_data)
        external_data_helper.set_external_data(t, DATA, offset=offset, length=size)
        t.ClearField("raw_data")
        t.data_location = onnx.TensorProto.EXTERNAL
        marked.append(t.name)
        offset += -(-size // 4096) * 4096
    path = os.path.join(out, "hf_gpt2.onnx")
    with open(path, "wb") as f:
        f.write(g.SerializeToString())
    for p in (full, full + ".data"):
        if os.path.exists(p):
            os.remove(p)
    info = {"data_bytes": offset, "external": len(marked), "initializers": len(g.graph.initializer), "graph_bytes": os.path.getsize(path),
            "first_external": marked[:3]}
    json.dump(info, open(os.path.join(out, "hf_gpt2.json"), "w"), indent=1)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
