# The GPU benchmark's two models, as ../shared/bench/torch_peers.py defines
# them (same modules, names and settings), so that one state_dict fits both
# sides. `explicit=True` writes attention out as matmul, mask, softmax,
# matmul (the math of scaled_dot_product_attention) for the ONNX export with
# Debian's PyTorch 1.13, which has no SDPA; the mask and positions are
# computed inline, so the export holds them as constants, not parameters.
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

MLP_B, MLP_D, MLP_L = 8192, 4096, 8
GPT_B, GPT_T, GPT_V, GPT_C, GPT_L, GPT_H = 16, 1024, 50304, 768, 12, 12


class MLP(nn.Module):
    def __init__(s, d=MLP_D, L=MLP_L, explicit=False):
        super().__init__()
        s.ls = nn.ModuleList([nn.Linear(d, d) for _ in range(L)])
        s.explicit = explicit

    def forward(s, x, y):
        for l in s.ls[:-1]:
            x = F.gelu(l(x))
        out = s.ls[-1](x).float()
        return ((out - y) ** 2).mean() if s.explicit else F.mse_loss(out, y)  # 1.13 exports no mse_loss


class Block(nn.Module):
    def __init__(s, d, h, explicit):
        super().__init__()
        s.h, s.explicit = h, explicit
        s.ln1 = nn.LayerNorm(d); s.qkv = nn.Linear(d, 3 * d); s.proj = nn.Linear(d, d)
        s.ln2 = nn.LayerNorm(d); s.fc = nn.Linear(d, 4 * d); s.fc2 = nn.Linear(4 * d, d)

    def forward(s, x):
        Bq, T, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = [t.view(Bq, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v)]
        if s.explicit:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // s.h))
            mask = torch.ones(T, T, dtype=torch.bool).tril().view(1, 1, T, T)
            y = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.proj(y.transpose(1, 2).reshape(Bq, T, C))
        return x + s.fc2(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s, V=GPT_V, T=GPT_T, d=GPT_C, L=GPT_L, h=GPT_H, explicit=False):
        super().__init__()
        s.wte = nn.Embedding(V, d); s.wpe = nn.Embedding(T, d)
        s.blocks = nn.ModuleList([Block(d, h, explicit) for _ in range(L)]); s.lnf = nn.LayerNorm(d)
        s.head = nn.Linear(d, V, bias=False); s.head.weight = s.wte.weight

    def forward(s, idx, tgt):
        T = idx.shape[1]
        x = s.wte(idx) + s.wpe(torch.arange(T, device=idx.device))
        for b in s.blocks:
            x = b(x)
        logits = s.head(s.lnf(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.view(-1))


# A Llama-style model at a realistic size (issue 20): 8 layers of width 2048, 16 heads sharing 4
# key/value heads, SwiGLU, RMSNorm, rotary positions, sequence 2048, batch 4.
LLAMA_B, LLAMA_T, LLAMA_V, LLAMA_C, LLAMA_L, LLAMA_H, LLAMA_KV, LLAMA_F = 4, 2048, 32000, 2048, 8, 16, 4, 5632


class RMSNorm(nn.Module):
    def __init__(s, d, eps=1e-5):
        super().__init__()
        s.eps, s.weight = eps, nn.Parameter(torch.ones(d))

    def forward(s, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s.eps) * s.weight


def rotary(x, T):
    """x [B, H, T, D] rotated by its position (the tables computed inline: constants in an export)."""
    D = x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1).to(x.device, x.dtype), torch.cat([ang.sin(), ang.sin()], -1).to(x.device, x.dtype)
    half = torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)
    return x * cos + half * sin


class LlamaBlock(nn.Module):
    def __init__(s, d, h, kv, f, explicit):
        super().__init__()
        s.h, s.kv, s.explicit = h, kv, explicit
        s.n1, s.n2 = RMSNorm(d), RMSNorm(d)
        s.q, s.k, s.v = nn.Linear(d, d, bias=False), nn.Linear(d, d * kv // h, bias=False), nn.Linear(d, d * kv // h, bias=False)
        s.o = nn.Linear(d, d, bias=False)
        s.gate, s.up, s.down = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False), nn.Linear(f, d, bias=False)

    def forward(s, x):
        Bq, T, C = x.shape
        D = C // s.h
        y = s.n1(x)
        q = s.q(y).view(Bq, T, s.h, D).transpose(1, 2)
        k, v = (m(y).view(Bq, T, s.kv, D).transpose(1, 2) for m in (s.k, s.v))
        q, k = rotary(q, T), rotary(k, T)
        rep = s.h // s.kv  # each key/value head serves `rep` query heads (Hugging Face's repeat_kv)
        k, v = (t[:, :, None].expand(Bq, s.kv, rep, T, D).reshape(Bq, s.h, T, D) for t in (k, v))
        if s.explicit:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            mask = torch.ones(T, T, dtype=torch.bool).tril().view(1, 1, T, T)
            a = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1) @ v
        else:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.o(a.transpose(1, 2).reshape(Bq, T, C))
        y = s.n2(x)
        return x + s.down(F.silu(s.gate(y)) * s.up(y))


class Llama(nn.Module):
    def __init__(s, V=LLAMA_V, d=LLAMA_C, L=LLAMA_L, h=LLAMA_H, kv=LLAMA_KV, f=LLAMA_F, explicit=False):
        super().__init__()
        s.embed = nn.Embedding(V, d)
        s.blocks = nn.ModuleList([LlamaBlock(d, h, kv, f, explicit) for _ in range(L)])
        s.norm, s.head = RMSNorm(d), nn.Linear(d, V, bias=False)

    def forward(s, idx, tgt):
        x = s.embed(idx)
        for b in s.blocks:
            x = b(x)
        logits = s.head(s.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.view(-1))


# The attention benchmark's shapes (bench/gpu_attention.py): name -> batch, heads, sequence, head width.
ATTN = {"attn64": (16, 12, 1024, 64), "attn128": (4, 32, 2048, 128), "attn128g": (4, 32, 2048, 128)}
# Shapes whose keys and values have fewer heads than the queries (Llama's grouped heads, four query
# heads a key/value head): name -> key/value heads.
KV_HEADS = {"attn128g": 8}
# Without the causal mask (an encoder's self-attention): checked, not part of the default timing.
ATTN_FULL = {"attn64full": (4, 12, 1024, 64), "attn128full": (2, 16, 1024, 128)}


class Attention(nn.Module):
    """Causal self-attention alone (or, `causal` false, unmasked), for timing it: q, k and v are the
    input scaled by a parameter each (so that all three get gradients), loss the mean squared
    difference from a target. With `kv` heads, k and v are the first `kv` heads of the input, each
    serving H / kv query heads as Hugging Face's repeat_kv writes it."""
    def __init__(s, d, explicit=False, causal=True, kv=None):
        super().__init__()
        s.explicit, s.causal, s.kv = explicit, causal, kv
        s.a, s.b, s.c = (nn.Parameter(1 + 0.1 * torch.randn(d)) for _ in range(3))

    def forward(s, x, y):
        kv = x[:, :s.kv] if s.kv else x
        q, k, v = x * s.a, kv * s.b, kv * s.c
        if s.kv:
            B, H, T, D = x.shape
            k, v = (t[:, :, None].expand(B, s.kv, H // s.kv, T, D).reshape(B, H, T, D) for t in (k, v))
        if s.explicit:
            T = x.shape[-2]
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(x.shape[-1]))
            if s.causal:
                mask = torch.ones(T, T, dtype=torch.bool).tril().view(1, 1, T, T)
                att = att.masked_fill(~mask, float("-inf"))
            out = F.softmax(att, dim=-1) @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=s.causal)
        return ((out.float() - y) ** 2).mean()


def make(name, explicit=False):
    torch.manual_seed(0)
    if name in ATTN or name in ATTN_FULL:
        return Attention({**ATTN, **ATTN_FULL}[name][3], explicit=explicit, causal=name in ATTN, kv=KV_HEADS.get(name))
    if name == "llama":
        return Llama(explicit=explicit)
    return MLP(explicit=explicit) if name == "mlp" else GPT(explicit=explicit)


def batch(name, device="cpu", rows=None):
    """The benchmark's batch (the same on both sides): seeded, `rows` overrides the batch size."""
    g = torch.Generator().manual_seed(1)
    if name == "mlp":
        b = rows or MLP_B
        return torch.randn(b, MLP_D, generator=g).to(device), torch.randn(b, MLP_D, generator=g).to(device)
    if name in ATTN or name in ATTN_FULL:
        B, H, T, D = {**ATTN, **ATTN_FULL}[name]
        shape = (rows or B, H, T, D)
        return torch.randn(shape, generator=g).to(device), torch.randn(shape, generator=g).to(device)
    if name == "llama":
        b = rows or LLAMA_B
        return (torch.randint(0, LLAMA_V, (b, LLAMA_T), generator=g).to(device), torch.randint(0, LLAMA_V, (b, LLAMA_T), generator=g).to(device))
    b = rows or GPT_B
    return (torch.randint(0, GPT_V, (b, GPT_T), generator=g).to(device), torch.randint(0, GPT_V, (b, GPT_T), generator=g).to(device))


def rank_batch(name, rank, world, device="cpu"):
    """Rank `rank`'s contiguous 1/world of a batch `world` times the benchmark's (the benchmark's own at world 1):
    data parallelism at a fixed batch per GPU."""
    if world == 1:
        return batch(name, device)
    rows = GPT_B if name == "gpt" else MLP_B
    return tuple(t[rank * rows:(rank + 1) * rows].contiguous() for t in batch(name, device, rows * world))


def export_attention(name, path):
    """Exports attention model `name` written out (explicit) to ONNX `path` with Debian's PyTorch
    1.13, its batch dimension named B, in training mode (bench/gpu_attention_build.sh, and the GPU
    bundle's first-step check)."""
    import warnings
    warnings.filterwarnings("ignore")
    with torch.no_grad():
        torch.onnx.export(make(name, explicit=True), batch(name, rows=1), path, input_names=["x", "y"], output_names=["loss"],
                          opset_version=17, do_constant_folding=False, dynamic_axes={n: {0: "B"} for n in ("x", "y")},
                          training=torch.onnx.TrainingMode.TRAINING)
