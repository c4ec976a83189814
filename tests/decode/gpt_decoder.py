"""A small GPT-style decoder with a key/value cache, written with PyTorch, and
PyTorch's own greedy decoding of it: the model and the reference the decode
tests compare sgc against.

    gpt_decoder.py export OUT.onnx [SEED [SIZE]]   the decoder (SIZES), exported with its cache
                                                   (past_key_values in, present out); a Decoder
                                                   with cache_positions = True takes no position
                                                   ids and counts from the cache's length
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {  # vocabulary, context, width, heads, layers
    "test": (96, 64, 32, 4, 2),
    "test64": (96, 64, 128, 2, 2),  # heads of 64: the GPU's warp-per-head paged attention
    "gpt2": (50257, 1024, 768, 12, 12),  # GPT-2 small's sizes
    "attn": (512, 4096, 4096, 32, 1),  # one layer of 32 heads of 128: the paged attention benchmark's
}


class Linear(nn.Module):
    """x @ weight + bias with weight [in, out]: exported as a MatMul of the parameter itself, so
    the ONNX initializers carry the state_dict's names (nn.Linear's are transposed copies)."""

    def __init__(self, n_in, n_out, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) / math.sqrt(n_in))
        self.bias = nn.Parameter(torch.randn(n_out) * 0.02) if bias else None

    def forward(self, x):
        y = x @ self.weight
        return y + self.bias if self.bias is not None else y


class Block(nn.Module):
    def __init__(self, ctx, dim, heads):
        super().__init__()
        self.dim, self.heads = dim, heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = Linear(dim, 3 * dim)
        self.proj = Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = Linear(dim, 4 * dim)
        self.out = Linear(4 * dim, dim)
        self.register_buffer("bias", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)).view(1, 1, ctx, ctx), persistent=False)

    def forward(self, x, past_k, past_v):
        b, t, c = x.shape
        hd = self.dim // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(self.dim, dim=2)
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        tq, tk = q.size(2), k.size(2)
        att = att.masked_fill(~self.bias[:, :, tk - tq:tk, :tk], float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        x = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return x, k, v


class Decoder(nn.Module):
    def __init__(self, size="test"):
        super().__init__()
        vocab, ctx, dim, heads, layers = SIZES[size]
        self.size, self.dim, self.heads, self.layers = size, dim, heads, layers
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList([Block(ctx, dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = Linear(dim, vocab, bias=False)

    cache_positions = False  # True: no position input; positions follow the cache's length (as Hugging Face's)

    def forward(self, input_ids, *inputs):
        if self.cache_positions:
            past, start = inputs, inputs[0].shape[2]
            position_ids = torch.arange(start, start + input_ids.shape[1]).unsqueeze(0)
        else:
            position_ids, *past = inputs
        x = self.wte(input_ids) + self.wpe(position_ids)
        present = []
        for i, blk in enumerate(self.blocks):
            x, k, v = blk(x, past[2 * i], past[2 * i + 1])
            present += [k, v]
        return (self.head(self.ln(x)), *present)


def make(seed, size="test"):
    torch.manual_seed(seed)
    m = Decoder(size).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():  # no two alike (the exporter would share them)
            if "ln" in name:
                p.add_(torch.randn_like(p) * 0.1)
        m.head.weight.mul_(4.0)  # spread the logits so that greedy choices are clear-cut
    return m


def empty_cache(m, batch, dtype=torch.float32, device="cpu"):
    return [torch.zeros(batch, m.heads, 0, m.dim // m.heads, dtype=dtype, device=device) for _ in range(2 * m.layers)]


def export(m, path):
    ids = torch.tensor([[1, 2, 3]])
    pos = torch.tensor([[2, 3, 4]])
    past = [torch.randn(1, m.heads, 2, m.dim // m.heads) for _ in range(2 * m.layers)]
    names = [f"past_{kv}_{i}" for i in range(m.layers) for kv in ("key", "value")]
    outs = ["logits"] + [f"present_{kv}_{i}" for i in range(m.layers) for kv in ("key", "value")]
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "position_ids": {0: "batch", 1: "seq"}}
    for n in names:
        dyn[n] = {0: "batch", 2: "past"}
    front = ["input_ids"] if m.cache_positions else ["input_ids", "position_ids"]
    if m.cache_positions:
        del dyn["position_ids"]
    torch.onnx.export(m, (ids, *([] if m.cache_positions else [pos]), *past), path, input_names=front + names, output_names=outs,
                      dynamic_axes=dyn, opset_version=17)


def greedy(m, prompt, new_tokens, with_logits=False):
    """PyTorch's greedy decoding of one prompt with the cache: the generated ids (and the logits
    each was chosen from)."""
    with torch.no_grad():
        past = empty_cache(m, 1)
        ids = torch.tensor([prompt])
        pos = torch.arange(len(prompt)).unsqueeze(0)
        out, seen = [], []
        for _ in range(new_tokens):
            logits, *past = m(ids, pos, *past)
            nxt = int(logits[0, -1].argmax())
            out.append(nxt)
            seen.append(logits[0, -1].tolist())
            pos = torch.tensor([[pos[0, -1].item() + 1]])
            ids = torch.tensor([[nxt]])
        return (out, seen) if with_logits else out


if __name__ == "__main__":
    import sys
    if len(sys.argv) < 3 or sys.argv[1] != "export":
        sys.exit("usage: gpt_decoder.py export OUT.onnx [SEED [SIZE]]")
    export(make(int(sys.argv[3]) if len(sys.argv) > 3 else 0, sys.argv[4] if len(sys.argv) > 4 else "test"), sys.argv[2])
