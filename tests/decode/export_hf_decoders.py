# Exports Hugging Face causal LMs as users have them: plain `input_ids -> logits`
# models with no cache inputs, written by the transformers library and exported by
# today's PyTorch, together with the library's own greedy generation for several
# prompts. Runs on the GPU machine (torch 2.11, transformers; on its CPU, float32);
# what it writes is committed under tests/decode/fixtures so CI needs no GPU.
#
# For each model NAME (gpt2: learned positions, multi-head; llama: rotary,
# grouped-query heads) it writes, into OUTDIR:
#   NAME.EXPORT.onnx  EXPORT is one of EXPORTS: the default dynamo exporter at opset 18,
#                     the same at opset 23 (its Attention op), and the TorchScript-based
#                     exporter at opset 17 (attention decomposed into MatMul/Softmax);
#                     batch and sequence are dynamic axes
#   NAME.json         the configuration, each export's op counts (or its error), the
#                     prompts and transformers' greedy continuations of them, and the
#                     logits of the first prompt's last position
# Usage: python3 export_hf_decoders.py OUTDIR [NAME ...]
import json, os, sys, traceback

import torch
import torch.nn as nn

VOCAB, CONTEXT, NEW_TOKENS = 512, 64, 12
PROMPTS = [[5, 17, 300, 42], [7, 7, 7, 7, 7, 7, 7, 7, 7], [511, 1], [100, 200, 300, 400, 500, 1, 2, 3, 4, 5, 6, 7]]


class Logits(nn.Module):
    """The model as a user exports it for inference: input_ids in, logits out, no cache."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=CONTEXT, n_embd=64, n_layer=2, n_head=4,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    return LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
                                        attention_dropout=0.0))


MODELS = {"gpt2": gpt2, "llama": llama}


def export(model, path, exporter):
    x = torch.tensor([PROMPTS[0]])
    if exporter == "legacy17":
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17, input_names=["input_ids"],
                          output_names=["logits"], dynamic_axes={"input_ids": {0: "batch", 1: "seq"}})
        return
    d = torch.export.Dim
    torch.onnx.export(model, (x,), path, dynamo=True, opset_version=int(exporter[-2:]), external_data=False,
                      input_names=["input_ids"], output_names=["logits"],
                      dynamic_shapes={"input_ids": {0: d("batch", max=16), 1: d("seq", max=CONTEXT)}})


def ops(path):
    import onnx
    m = onnx.load(path)
    count = {}
    for n in m.graph.node:
        k = (n.domain or "ai.onnx") + "::" + n.op_type
        count[k] = count.get(k, 0) + 1
    return {"ops": dict(sorted(count.items())), "functions": len(m.functions), "bytes": os.path.getsize(path),
            "opsets": {o.domain or "ai.onnx": o.version for o in m.opset_import}}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    import transformers
    for name in sys.argv[2:] or list(MODELS):
        torch.manual_seed(0)
        m = MODELS[name]().eval()
        info = {"model": name, "torch": torch.__version__, "transformers": transformers.__version__,
                "config": m.config.to_diff_dict(), "new_tokens": NEW_TOKENS, "prompts": PROMPTS, "exports": {}}
        with torch.no_grad():
            info["greedy"] = [m.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.int64),
                                         max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)[0, len(p):].tolist()
                              for p in PROMPTS]
            info["last_logits"] = m(input_ids=torch.tensor([PROMPTS[0]])).logits[0, -1].tolist()
        for exporter in ("dynamo18", "dynamo23", "legacy17"):
            path = os.path.join(out, f"{name}.{exporter}.onnx")
            try:
                export(Logits(m), path, exporter)
                info["exports"][exporter] = ops(path)
            except Exception:
                info["exports"][exporter] = {"error": traceback.format_exc()[-1500:]}
                if os.path.exists(path):
                    os.remove(path)
            print(name, exporter, "FAILED" if "error" in info["exports"][exporter] else "ok", flush=True)
        with open(os.path.join(out, f"{name}.json"), "w") as f:
            json.dump(info, f, indent=1, sort_keys=True)
        print(name, "greedy", info["greedy"], flush=True)


if __name__ == "__main__":
    main()
