# Writes a long chain: x -> Mul(w) -> Tanh -> Tanh -> ... (N Tanh nodes) ->
# ReduceMean, a model whose compile time shows how the compiler scales with
# graph length (it must grow linearly). Usage: /usr/bin/python3 long_chain.py N OUT.onnx
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

n, out = int(sys.argv[1]), sys.argv[2]
nodes = [helper.make_node("Mul", ["x", "w"], ["t0"])]
for i in range(n):
    nodes.append(helper.make_node("Tanh", [f"t{i}"], [f"t{i + 1}"]))
nodes.append(helper.make_node("ReduceMean", [f"t{n}"], ["loss"], keepdims=0))
w = numpy_helper.from_array(np.full((4, 8), 0.5, np.float32), "w")
graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], [w])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), out)
