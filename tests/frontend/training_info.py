# A model carrying ONNX training information (TrainingInfoProto): an
# initialization graph that sets w, and an algorithm that takes the Gradient
# of the loss with respect to w and applies ai.onnx.preview.training's
# Momentum, with update bindings for w and its velocity. `sgc run` evaluates
# one step; the outputs must equal numpy's computation of the same step.
# Usage: /usr/bin/python3 training_info.py SGC WORKDIR
import json, os, subprocess, sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyutil"))
import st  # noqa: E402

T = TensorProto.FLOAT


def main():
    sgc, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    # Inference graph: loss = sum((x * w)^2)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["xw"]), helper.make_node("Mul", ["xw", "xw"], ["sq"]),
         helper.make_node("ReduceSum", ["sq"], ["loss"], keepdims=0)],
        "main", [helper.make_tensor_value_info("x", T, [3])], [helper.make_tensor_value_info("loss", T, [])],
        [numpy_helper.from_array(np.zeros(3, np.float32), "w"), numpy_helper.from_array(np.zeros(3, np.float32), "v")])
    w0 = np.array([0.5, -1.0, 2.0], np.float32)
    init = helper.make_graph([helper.make_node("Constant", [], ["w_init"], value=numpy_helper.from_array(w0))],
                             "init", [], [helper.make_tensor_value_info("w_init", T, [3])])
    algo = helper.make_graph(
        [helper.make_node("Gradient", ["x", "w"], ["dx", "dw"], xs=["x", "w"], y="loss", domain="ai.onnx.preview.training"),
         helper.make_node("Momentum", ["R", "T", "w", "dw", "v"], ["w_new", "v_new"], alpha=0.9, beta=1.0,
                          mode="standard", norm_coefficient=0.01, domain="ai.onnx.preview.training")],
        "algo", [helper.make_tensor_value_info("R", T, []), helper.make_tensor_value_info("T", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("dx", T, [3]), helper.make_tensor_value_info("w_new", T, [3]),
         helper.make_tensor_value_info("v_new", T, [3])])
    ti = onnx.TrainingInfoProto()
    ti.initialization.CopyFrom(init)
    ti.algorithm.CopyFrom(algo)
    ti.initialization_binding.add(key="w", value="w_init")
    ti.update_binding.add(key="w", value="w_new")
    ti.update_binding.add(key="v", value="v_new")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.preview.training", 1)])
    model.training_info.append(ti)
    path = os.path.join(work, "train_info.onnx")
    onnx.save(model, path)
    x = np.array([1.0, 2.0, -3.0], np.float32)
    st.write(os.path.join(work, "in.safetensors"), {"x": x, "R": np.array(0.1, np.float32), "T": np.array(1, np.int64)})
    r = subprocess.run([sgc, "run", path, "--inputs", os.path.join(work, "in.safetensors"), "-o", os.path.join(work, "out.safetensors")],
                       capture_output=True, text=True)
    if r.returncode:
        print("FAIL:", r.stderr)
        return 1
    got = st.read(os.path.join(work, "out.safetensors"))
    x64, w = x.astype(np.float64), w0.astype(np.float64)
    dw, dx = 2 * x64 * x64 * w, 2 * w * w * x64
    g = 0.01 * w + dw
    v_new = 0.9 * 0 + 1.0 * g
    want = {"loss": np.sum((x64 * w) ** 2), "dx": dx, "w_new": w - 0.1 * v_new, "v_new": v_new}
    bad = [k for k in want if not np.allclose(got[k], want[k], rtol=1e-6, atol=1e-6)]
    for k in bad:
        print(f"FAIL {k}: {got[k]} vs {want[k]}")
    print("training info:", "passed" if not bad else "FAILED")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
