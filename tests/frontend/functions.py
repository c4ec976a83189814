# A model with model-local functions (ModelProto.functions): ScaledTanh(x)
# {alpha} = tanh(x * alpha), a reference to the caller's attribute, called
# twice with different alphas, and Outer(x) calling ScaledTanh inside its own
# body. `sgc run` must inline them and give numpy's result; `sgc train` must
# differentiate through them (one SGD step against numpy's gradient).
# Usage: /usr/bin/python3 functions.py SGC WORKDIR
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
    alpha = helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT) if hasattr(helper, "make_attribute_ref") else None
    if alpha is None:  # onnx 1.12: an AttributeProto with ref_attr_name set by hand
        alpha = onnx.AttributeProto(name="alpha", ref_attr_name="alpha", type=onnx.AttributeProto.FLOAT)
    scale = helper.make_node("Constant", [], ["a"], value_float=1.0)
    scale.attribute[0].CopyFrom(onnx.AttributeProto(name="value_float", ref_attr_name="alpha", type=onnx.AttributeProto.FLOAT))
    scaled_tanh = helper.make_function("local", "ScaledTanh", ["x"], ["y"],
                                       [scale, helper.make_node("Mul", ["x", "a"], ["xa"]), helper.make_node("Tanh", ["xa"], ["y"])],
                                       [helper.make_opsetid("", 17)], ["alpha"])
    outer = helper.make_function("local", "Outer", ["x"], ["y"],
                                 [helper.make_node("ScaledTanh", ["x"], ["t"], domain="local", alpha=0.5),
                                  helper.make_node("Add", ["t", "x"], ["y"])], [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)], [])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["xw"]),
         helper.make_node("ScaledTanh", ["xw"], ["t1"], domain="local", alpha=2.0),
         helper.make_node("Outer", ["t1"], ["t2"], domain="local"),
         helper.make_node("ReduceSum", ["t2"], ["loss"], keepdims=0)],
        "main", [helper.make_tensor_value_info("x", T, [4])], [helper.make_tensor_value_info("loss", T, [])],
        [numpy_helper.from_array(np.array([0.3, -0.7, 1.1, 0.2], np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)], functions=[scaled_tanh, outer])
    path = os.path.join(work, "functions.onnx")
    onnx.save(model, path)
    x = np.array([1.0, 0.5, -0.25, 2.0], np.float32)
    w = np.array([0.3, -0.7, 1.1, 0.2], np.float64)
    st.write(os.path.join(work, "in.safetensors"), {"x": x})
    out = os.path.join(work, "out.safetensors")
    r = subprocess.run([sgc, "run", path, "--inputs", os.path.join(work, "in.safetensors"), "-o", out], capture_output=True, text=True)
    if r.returncode:
        sys.exit("sgc run failed: " + r.stderr)
    t1 = np.tanh(2.0 * x * w)
    want = (np.tanh(0.5 * t1) + t1).sum()
    got = float(st.read(out)["loss"])
    print(f"loss through two inlined functions: sgc {got:.7f}, numpy {want:.7f}")
    if abs(got - want) > 1e-5 * abs(want):
        sys.exit("FAILED: the inlined functions compute something else")
    # One SGD step (lr 1): w' = w - dloss/dw.
    st.write(os.path.join(work, "data.safetensors"), {"x": x[None]})
    ck = os.path.join(work, "after.safetensors")
    r = subprocess.run([sgc, "train", path, "--data", os.path.join(work, "data.safetensors"), "--steps", "1", "--lr", "1",
                        "--save", ck], capture_output=True, text=True)
    if r.returncode:
        sys.exit("sgc train failed: " + r.stderr)
    dt1 = 0.5 * (1 - np.tanh(0.5 * t1) ** 2) + 1
    dw = dt1 * (1 - t1 ** 2) * 2.0 * x
    got_w = st.read(ck)["w"].astype(np.float64)
    err = np.abs(got_w - (w - dw)).max()
    print(f"one SGD step through the functions: max parameter difference from numpy {err:.2e}")
    if err > 1e-5:
        sys.exit("FAILED: the gradient through the inlined functions is wrong")


if __name__ == "__main__":
    main()
