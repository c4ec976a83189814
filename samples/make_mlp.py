# Generates the bundled samples: samples/mlp.onnx (a 2-layer MLP with
# LayerNorm, GELU and a residual, exported by PyTorch with a symbolic batch
# dim), samples/mlp_inputs.safetensors (one batch of inputs) and PyTorch's
# outputs for it; and samples/mlp_train.onnx (the same MLP with a
# cross-entropy loss, exported in training mode) with four batches of
# training data in samples/mlp_train_data.safetensors.
# Run with Debian's python3: /usr/bin/python3 samples/make_mlp.py
import json, os, struct, sys
import torch

here = os.path.dirname(os.path.abspath(__file__))


class MLP(torch.nn.Module):
    def __init__(self, d=16, h=32, classes=4):
        super().__init__()
        self.fc1 = torch.nn.Linear(d, h)
        self.fc2 = torch.nn.Linear(h, d)
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, x):
        y = self.fc2(torch.nn.functional.gelu(self.fc1(x)))
        return self.head(self.norm(x + y))


class MLPWithLoss(torch.nn.Module):
    def __init__(self, mlp):
        super().__init__()
        self.mlp = mlp

    def forward(self, x, labels):
        return torch.nn.functional.cross_entropy(self.mlp(x), labels)


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.numpy().tobytes()
        dtype = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = MLP().eval()
    x = torch.randn(8, 16)
    torch.onnx.export(model, (x,), os.path.join(here, "mlp.onnx"), input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}}, opset_version=17)
    write_safetensors(os.path.join(here, "mlp_inputs.safetensors"), {"x": x})
    write_safetensors(os.path.join(here, "mlp_expected.safetensors"), {"logits": model(x).detach()})
    # Training sample: 4 batches of 32 points whose class is the quadrant of their first two features.
    trainer = MLPWithLoss(model).train()
    xs = torch.randn(4, 32, 16)
    labels = (xs[:, :, 0] > 0).long() * 2 + (xs[:, :, 1] > 0).long()
    torch.onnx.export(trainer, (xs[0], labels[0]), os.path.join(here, "mlp_train.onnx"), input_names=["x", "labels"],
                      output_names=["loss"], opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    write_safetensors(os.path.join(here, "mlp_train_data.safetensors"), {"x": xs, "labels": labels})
