# A small GPT whose rows (model width 64, sequence 64, vocabulary 128) are
# multiples of a GPU warp, so that the GPU runs the warp-per-row forms of
# softmax, layer normalization and their gradients (codegen/kir/LowerGpu.cpp)
# while the CPU runs the generic kernels: check_gpu.sh compares the two. Also
# exported taking half of each batch (gptw_half.onnx), for two GPU ranks.
# And a wide MLP (16 -> 4096 -> 16, a LayerNorm of 4096) whose biases and
# norm weights need several GPU blocks each where their updates run together
# in one launch (codegen/FuseLaunches.h): wide.onnx. And a classifier over
# 10,000 classes, some targets ignored (-100), whose loss gradient runs a GPU
# block per row (codegen/kir/LowerSceBlockGpu.cpp), with a part step past the
# whole ones: vocab.onnx. And a small Llama (RMSNorm of width 64, SwiGLU,
# rotary, grouped key/value heads) whose RMSNorms run the warp-per-row forms
# with the residual sum stored as they read it: llamaw.onnx; and a wide MLP
# with an RMSNorm of 4096, a row too long for a warp to hold: wide_rms.onnx;
# and of 2048, the longest it holds: rms_2k.onnx. And GPTs with heads of 64 and 128 over 128
# positions, whose attention runs warpgroup products on Hopper: gpth.onnx and gpth128.onnx; and a
# Llama with two query heads of 128 a key/value head, whose attention gradient on Hopper stores
# dS^T for a dq kernel of one product: llamah128.onnx. And a classifier head without a bias, to run
# in row chunks: vocabh.onnx.
# Usage: /usr/bin/python3 export_warp_model.py SOURCE_DIR OUT_DIR
import os, sys, warnings
import torch
sys.path.insert(0, os.path.join(sys.argv[1], "bench"))
sys.path.insert(0, os.path.join(sys.argv[1], "tests", "pyutil"))
import gpu_models as gm
import st

warnings.filterwarnings("ignore")
out = sys.argv[2]
torch.manual_seed(0)
model = gm.GPT(V=128, T=64, d=64, L=2, h=2, explicit=True)
g = torch.Generator().manual_seed(3)
idx, tgt = torch.randint(0, 128, (12, 4, 64), generator=g), torch.randint(0, 128, (12, 4, 64), generator=g)
torch.onnx.export(model, (idx[0], tgt[0]), os.path.join(out, "gptw.onnx"), input_names=["idx", "tgt"], output_names=["loss"],
                  opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)  # eval mode ties equal initializers
st.write(os.path.join(out, "gptw_data.safetensors"), {"idx": idx, "tgt": tgt})
# GPTs whose attention runs Hopper's warpgroup products in bf16 (heads of 64 and of 128, 128
# positions: codegen/kir/LowerAttentionHopper.cpp): gpth.onnx and gpth128.onnx.
for name, h in (("gpth", 2), ("gpth128", 1)):
    torch.manual_seed(0)
    wide_heads = gm.GPT(V=128, T=128, d=128, L=2, h=h, explicit=True)
    hi, ht = torch.randint(0, 128, (12, 2, 128), generator=g), torch.randint(0, 128, (12, 2, 128), generator=g)
    torch.onnx.export(wide_heads, (hi[0], ht[0]), os.path.join(out, name + ".onnx"), input_names=["idx", "tgt"], output_names=["loss"],
                      opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    st.write(os.path.join(out, name + "_data.safetensors"), {"idx": hi, "tgt": ht})
# Grouped heads of 128 (two query heads a key/value head, 128 positions): on Hopper the attention
# gradient's dK/dV kernel stores dS^T through shared memory by bulk copies and a dq kernel of one
# product reads it back (codegen/kir/LowerAttentionHopper.cpp, scoreScratchElements).
torch.manual_seed(0)
llamah = gm.Llama(V=128, d=256, L=1, h=2, kv=1, f=128, explicit=True)  # 1.4 MB of weights
li, lt = torch.randint(0, 128, (12, 2, 128), generator=g), torch.randint(0, 128, (12, 2, 128), generator=g)
torch.onnx.export(llamah, (li[0], lt[0]), os.path.join(out, "llamah128.onnx"), input_names=["idx", "tgt"], output_names=["loss"],
                  opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
st.write(os.path.join(out, "llamah128_data.safetensors"), {"idx": li, "tgt": lt})
# The same model taking half of each batch: one rank's share when two train it data-parallel.
torch.onnx.export(model, (idx[0][:2], tgt[0][:2]), os.path.join(out, "gptw_half.onnx"), input_names=["idx", "tgt"],
                  output_names=["loss"], opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)


class Wide(torch.nn.Module):
    def __init__(s, d=16, hidden=4096, norm=torch.nn.LayerNorm, act=torch.nn.functional.gelu):
        super().__init__()
        s.up, s.norm, s.down, s.act = torch.nn.Linear(d, hidden), norm(hidden), torch.nn.Linear(hidden, d), act

    def forward(s, x, y):
        return ((s.down(s.act(s.norm(s.up(x)))) - y) ** 2).mean()


def export(model, data, name):
    """Exports `model` on the first batch of `data` (name -> [12, ...] tensors) as NAME.onnx, the batches as NAME_data.safetensors."""
    torch.onnx.export(model, tuple(v[0] for v in data.values()), os.path.join(out, name + ".onnx"), input_names=list(data),
                      output_names=["loss"], opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    st.write(os.path.join(out, name + "_data.safetensors"), data)


torch.manual_seed(0)
wide = Wide()
export(wide, {"x": torch.randn(12, 8, 16, generator=g), "y": torch.randn(12, 8, 16, generator=g)}, "wide")


class Vocab(torch.nn.Module):
    def __init__(s, d=64, classes=10000):
        super().__init__()
        s.head = torch.nn.Linear(d, classes)

    def forward(s, x, t):
        return torch.nn.functional.cross_entropy(s.head(x), t)


torch.manual_seed(0)
vocab = Vocab()
x, t = torch.randn(12, 64, 64, generator=g), torch.randint(0, 10000, (12, 64), generator=g)
t[torch.rand(12, 64, generator=g) < 0.1] = -100
export(vocab, {"x": x, "t": t}, "vocab")

torch.manual_seed(0)
llama = gm.Llama(V=128, d=64, L=2, h=4, kv=2, f=128, explicit=True)
export(llama, {"idx": torch.randint(0, 128, (12, 4, 64), generator=g), "tgt": torch.randint(0, 128, (12, 4, 64), generator=g)}, "llamaw")

torch.manual_seed(0)
wide_rms = Wide(norm=gm.RMSNorm, act=torch.nn.functional.silu)
export(wide_rms, {"x": torch.randn(12, 8, 16, generator=g), "y": torch.randn(12, 8, 16, generator=g)}, "wide_rms")
# And of 2,048 (Llama's width): the longest rows a warp holds, 64 a lane.
torch.manual_seed(0)
rms_2k = Wide(hidden=2048, norm=gm.RMSNorm, act=torch.nn.functional.silu)
export(rms_2k, {"x": torch.randn(12, 8, 16, generator=g), "y": torch.randn(12, 8, 16, generator=g)}, "rms_2k")

# A head without a bias over 10,000 classes, as language models have: the default builds run its
# classifier whole, make_bundle.sh's _chunks builds in row chunks (passes/ChunkClassifier), whose
# losses total the chunks' sums on the GPU (the block-per-row form with reduction "sum"): vocabh.onnx.
torch.manual_seed(0)
vocabh = Vocab()
vocabh.head = torch.nn.Linear(64, 10000, bias=False)
gh = torch.Generator().manual_seed(7)
xh, th = torch.randn(12, 64, 64, generator=gh), torch.randint(0, 10000, (12, 64), generator=gh)
th[torch.rand(12, 64, generator=gh) < 0.1] = -100
export(vocabh, {"x": xh, "t": th}, "vocabh")
