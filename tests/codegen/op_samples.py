# Writes op_samples.onnx: a small model whose loss passes through ops that no
# other test model differentiates (GatherElements, GatherND, CumProd, Not,
# NegativeLogLikelihoodLoss of other than a LogSoftmax, Resize in its three modes,
# an RMS normalization written out as Llama exports it, which passes/FuseRmsNorm fuses),
# so that sgc-check-ops sees their gradient ops' kernels too.
# Usage: /usr/bin/python3 op_samples.py OUT.onnx
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

T = TensorProto.FLOAT
rng = np.random.default_rng(0)
inits = [numpy_helper.from_array(rng.standard_normal((4, 6)).astype(np.float32), "w"),
         numpy_helper.from_array(np.array([[0, 5, 5], [1, 1, 2], [3, 0, 4], [2, 2, 2]], np.int64), "idx"),
         numpy_helper.from_array(np.array([[1, 2], [3, 5], [1, 2]], np.int64), "idx_nd"),
         numpy_helper.from_array(np.array(1, np.int64), "axis"),
         numpy_helper.from_array(np.array(0, np.float32), "zero"),
         numpy_helper.from_array(np.array([5, 0, 2, 3], np.int64), "labels"),
         numpy_helper.from_array(np.array([1, 1, 4, 6], np.int64), "image"),
         numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "up"),
         numpy_helper.from_array(np.array([1, 1, 3, 5], np.int64), "down"),
         numpy_helper.from_array(np.array([1, 1, 7, 11], np.int64), "odd"),
         numpy_helper.from_array(rng.uniform(0.5, 1.5, 6).astype(np.float32), "rms_w")]
const = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(v)))
nodes = [helper.make_node("Mul", ["x", "w"], ["h"]),
         helper.make_node("GatherElements", ["h", "idx"], ["g1"], axis=1),
         helper.make_node("GatherND", ["h", "idx_nd"], ["g2"]),
         helper.make_node("Sigmoid", ["h"], ["s"]),
         helper.make_node("CumProd", ["s", "axis"], ["c"], reverse=1),
         helper.make_node("Greater", ["h", "zero"], ["pos"]),
         helper.make_node("Not", ["pos"], ["neg"]),
         helper.make_node("Where", ["neg", "h", "zero"], ["m"]),
         helper.make_node("NegativeLogLikelihoodLoss", ["h", "labels"], ["nll"]),
         helper.make_node("Reshape", ["s", "image"], ["im"]),
         helper.make_node("Resize", ["im", "", "up"], ["r1"], mode="linear"),
         helper.make_node("Resize", ["im", "", "", "down"], ["r2"], mode="cubic", coordinate_transformation_mode="pytorch_half_pixel"),
         helper.make_node("Resize", ["im", "", "", "odd"], ["r3"], mode="nearest", coordinate_transformation_mode="asymmetric",
                          nearest_mode="floor"),
         const("two", np.float32(2)), const("eps", np.float32(1e-5)), const("last", np.array([-1], np.int64)),
         helper.make_node("Pow", ["h", "two"], ["h2"]),
         helper.make_node("ReduceMean", ["h2", "last"], ["ms"], keepdims=1),
         helper.make_node("Add", ["ms", "eps"], ["mse"]),
         helper.make_node("Sqrt", ["mse"], ["rms_s"]),
         helper.make_node("Reciprocal", ["rms_s"], ["rms_r"]),
         helper.make_node("Mul", ["h", "rms_r"], ["rms_n"]),
         helper.make_node("Mul", ["rms_w", "rms_n"], ["rms"])]
sums = []
for v in ["g1", "g2", "c", "m", "nll", "r1", "r2", "r3", "rms"]: # squared: a gradient of ones would fold to a constant
    nodes.append(helper.make_node("Mul", [v, v], [v + "_sq"]))
    nodes.append(helper.make_node("ReduceSum", [v + "_sq"], [v + "_sum"], keepdims=0))
    sums.append(v + "_sum")
nodes.append(helper.make_node("Sum", sums, ["loss"]))
graph = helper.make_graph(nodes, "op_samples", [helper.make_tensor_value_info("x", T, [4, 6])],
                          [helper.make_tensor_value_info("loss", T, [])], inits)
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)]), sys.argv[1])
