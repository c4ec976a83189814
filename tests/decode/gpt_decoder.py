"""A small GPT-style decoder with a key/value cache, written with PyTorch, and
PyTorch's own greedy decoding of it: the model and the reference the decode
tests compare sgc against.

    gpt_decoder.py export OUT.onnx [--seed N]   the decoder, exported with its cache
                                                (past_key_values in, present out)
    gpt_decoder.py greedy OUT.onnx.pt ...       (used by the tests, see decode_test.py)
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CTX, DIM, HEADS, LAYERS = 96, 64, 32, 4, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.ln2 = nn.LayerNorm(DIM)
        self.fc = nn.Linear(DIM, 4 * DIM)
        self.out = nn.Linear(4 * DIM, DIM)
        self.register_buffer("bias", torch.tril(torch.ones(CTX, CTX, dtype=torch.bool)).view(1, 1, CTX, CTX))

    def forward(self, x, past_k, past_v):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(DIM, dim=2)
        q = q.view(b, t, HEADS, DIM // HEADS).transpose(1, 2)
        k = k.view(b, t, HEADS, DIM // HEADS).transpose(1, 2)
        v = v.view(b, t, HEADS, DIM // HEADS).transpose(1, 2)
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(DIM // HEADS))
        tq, tk = q.size(2), k.size(2)
        att = att.masked_fill(~self.bias[:, :, tk - tq:tk, :tk], float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        x = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return x, k, v


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, DIM)
        self.wpe = nn.Embedding(CTX, DIM)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, input_ids, position_ids, *past):
        x = self.wte(input_ids) + self.wpe(position_ids)
        present = []
        for i, blk in enumerate(self.blocks):
            x, k, v = blk(x, past[2 * i], past[2 * i + 1])
            present += [k, v]
        return (self.head(self.ln(x)), *present)


def make(seed):
    torch.manual_seed(seed)
    m = Decoder().eval()
    with torch.no_grad():  # spread the logits so that greedy choices are clear-cut
        m.head.weight.mul_(4.0)
    return m


def empty_cache(batch):
    return [torch.zeros(batch, HEADS, 0, DIM // HEADS) for _ in range(2 * LAYERS)]


def export(m, path):
    ids = torch.tensor([[1, 2, 3]])
    pos = torch.tensor([[0, 1, 2]])
    past = [torch.randn(1, HEADS, 2, DIM // HEADS) for _ in range(2 * LAYERS)]
    pos = pos + 2
    names = [f"past_{kv}_{i}" for i in range(LAYERS) for kv in ("key", "value")]
    outs = ["logits"] + [f"present_{kv}_{i}" for i in range(LAYERS) for kv in ("key", "value")]
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "position_ids": {0: "batch", 1: "seq"}}
    for n in names:
        dyn[n] = {0: "batch", 2: "past"}
    torch.onnx.export(m, (ids, pos, *past), path, input_names=["input_ids", "position_ids"] + names, output_names=outs,
                      dynamic_axes=dyn, opset_version=14)


def greedy(m, prompt, new_tokens, with_logits=False):
    """PyTorch's greedy decoding of one prompt with the cache: the generated ids (and the logits
    each was chosen from)."""
    with torch.no_grad():
        past = empty_cache(1)
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
    m = make(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    export(m, sys.argv[2])
