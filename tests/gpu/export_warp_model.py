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
# whole ones: vocab.onnx.
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
# The same model taking half of each batch: one rank's share when two train it data-parallel.
torch.onnx.export(model, (idx[0][:2], tgt[0][:2]), os.path.join(out, "gptw_half.onnx"), input_names=["idx", "tgt"],
                  output_names=["loss"], opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)


class Wide(torch.nn.Module):
    def __init__(s, d=16, hidden=4096):
        super().__init__()
        s.up, s.norm, s.down = torch.nn.Linear(d, hidden), torch.nn.LayerNorm(hidden), torch.nn.Linear(hidden, d)

    def forward(s, x, y):
        return ((s.down(torch.nn.functional.gelu(s.norm(s.up(x)))) - y) ** 2).mean()


torch.manual_seed(0)
wide = Wide()
x, y = torch.randn(12, 8, 16, generator=g), torch.randn(12, 8, 16, generator=g)
torch.onnx.export(wide, (x[0], y[0]), os.path.join(out, "wide.onnx"), input_names=["x", "y"], output_names=["loss"],
                  opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
st.write(os.path.join(out, "wide_data.safetensors"), {"x": x, "y": y})


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
torch.onnx.export(vocab, (x[0], t[0]), os.path.join(out, "vocab.onnx"), input_names=["x", "t"], output_names=["loss"],
                  opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
st.write(os.path.join(out, "vocab_data.safetensors"), {"x": x, "t": t})
