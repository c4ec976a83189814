#!/bin/sh
# A training graph exported by torch.onnx.export in eval mode merges initializers of equal value
# (two LayerNorms' weights of ones become one, the other an Identity of it): sgc trains them as one
# parameter, as the file says, and warns (driver/Common.cpp warnCopiedParameters); the same model
# exported in training mode has two parameters and no warning.
# Usage: copied_params.sh SGC
set -u
sgc=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
/usr/bin/python3 - <<'PY' || exit 1
import warnings
import torch
import torch.nn as nn
warnings.filterwarnings("ignore")
class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.a, s.b, s.fc = nn.LayerNorm(8), nn.LayerNorm(8), nn.Linear(8, 8)
    def forward(s, x, y):
        return ((s.b(s.fc(s.a(x))) - y) ** 2).mean()
torch.manual_seed(0)
net, x = Net(), torch.randn(4, 8)
for mode, name in ((torch.onnx.TrainingMode.EVAL, "eval.onnx"), (torch.onnx.TrainingMode.TRAINING, "train.onnx")):
    torch.onnx.export(net, (x, x), name, input_names=["x", "y"], output_names=["loss"], opset_version=17, training=mode,
                      do_constant_folding=False)
PY
failures=0
"$sgc" compile eval.onnx -o eval.so --target cpu 2> eval.err || { echo "FAIL: compile eval.onnx: $(cat eval.err)"; failures=1; }
for want in "sgc: warning: eval.onnx: 2 values are Identity copies of a parameter" "b.weight = a.weight" "b.bias = a.bias" "TrainingMode.TRAINING"; do
  grep -qF "$want" eval.err || { echo "FAIL: the warning for the merged LayerNorms lacks '$want': $(cat eval.err)"; failures=1; }
done
"$sgc" compile train.onnx -o train.so --target cpu 2> train.err || { echo "FAIL: compile train.onnx: $(cat train.err)"; failures=1; }
[ ! -s train.err ] || { echo "FAIL: a warning for the training-mode export: $(cat train.err)"; failures=1; }
[ "$failures" = 0 ] && echo "copied parameters: warned for the eval-mode export, not for the training-mode one"
exit "$failures"
