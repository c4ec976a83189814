# `sgc train` on bad input and across a checkpoint: each misuse gives a clear
# error and a non-zero status; a NaN loss is reported on its step's line and
# stops the run; training 3 steps, saving, loading and training 3 more gives
# the same losses as 6 steps in one run (optimizer state is saved).
# Usage: /usr/bin/python3 train_cli.py SGC WORKDIR
import json, os, subprocess, sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyutil"))
import st  # noqa: E402


def model(path, nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "t", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def tensor_info(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def main():
    sgc, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    p = lambda n: os.path.join(work, n)
    rng = np.random.default_rng(0)
    # loss = mean((x @ w - t)^2), plus a non-scalar output y
    model(p("lin.onnx"), [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Sub", ["y", "t"], ["d"]),
                          helper.make_node("Mul", ["d", "d"], ["d2"]),
                          helper.make_node("ReduceMean", ["d2"], ["loss"], keepdims=0)],
          [tensor_info("x", TensorProto.FLOAT, [4, 3]), tensor_info("t", TensorProto.FLOAT, [4, 2])],
          [tensor_info("loss", TensorProto.FLOAT, []), tensor_info("y", TensorProto.FLOAT, [4, 2])],
          {"w": rng.standard_normal((3, 2)).astype(np.float32)})
    data = {"x": rng.standard_normal((2, 4, 3)).astype(np.float32), "t": rng.standard_normal((2, 4, 2)).astype(np.float32)}
    st.write(p("data.safetensors"), data)
    st.write(p("extra.safetensors"), dict(data, z=np.zeros((2, 1), np.float32)))
    st.write(p("dtype.safetensors"), dict(data, x=data["x"].astype(np.float64)))
    st.write(p("shape.safetensors"), dict(data, x=np.zeros((2, 4, 5), np.float32)))
    st.write(p("missing.safetensors"), {"x": data["x"]})
    # a model without initializers, and one whose loss turns NaN: sum(log(x * w))
    model(p("none.onnx"), [helper.make_node("ReduceSum", ["x"], ["loss"], keepdims=0)],
          [tensor_info("x", TensorProto.FLOAT, [4, 3])], [tensor_info("loss", TensorProto.FLOAT, [])], {})
    model(p("nan.onnx"), [helper.make_node("Mul", ["x", "w"], ["xw"]), helper.make_node("Log", ["xw"], ["l"]),
                          helper.make_node("ReduceSum", ["l"], ["loss"], keepdims=0)],
          [tensor_info("x", TensorProto.FLOAT, [4, 3])], [tensor_info("loss", TensorProto.FLOAT, [])],
          {"w": np.ones((3,), np.float32)})
    st.write(p("neg.safetensors"), {"x": -np.ones((1, 4, 3), np.float32)})
    # training-mode dropout: loss = sum(dropout(x * w))
    ratio = numpy_helper.from_array(np.array(0.5, np.float32), "ratio")
    mode = numpy_helper.from_array(np.array(True), "mode")
    g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["xw"]),
                           helper.make_node("Dropout", ["xw", "ratio", "mode"], ["dropped"], seed=5),
                           helper.make_node("ReduceSum", ["dropped"], ["loss"], keepdims=0)], "drop",
                          [tensor_info("x", TensorProto.FLOAT, [64, 3])], [tensor_info("loss", TensorProto.FLOAT, [])],
                          [numpy_helper.from_array(np.ones(3, np.float32), "w"), ratio, mode])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p("drop.onnx"))
    st.write(p("same.safetensors"), {"x": np.ones((1, 64, 3), np.float32)})

    train = lambda *a: subprocess.run([sgc, "train", *a], capture_output=True, text=True)
    base = [p("lin.onnx"), "--data", p("data.safetensors"), "--steps", "2"]
    cases = [
        (base + ["--loss", "y"], "loss 'y' is f32[4, 2], expected a floating-point scalar"),
        (base + ["--loss", "nope"], "loss 'nope' is not an output of the model (outputs: loss, y)"),
        ([p("none.onnx"), "--data", p("data.safetensors"), "--steps", "1"], "the model has nothing to train"),
        (base + ["--freeze", "^w$"], "nothing to train: --freeze '^w$' matches every parameter"),
        (base + ["--freeze", "(["], "is not a valid regular expression"),
        (base + ["--optimizer", "lion"], "unknown optimizer 'lion'"),
        (base + ["--lr", "fast"], "--lr expects a number, got 'fast'"),
        ([p("lin.onnx"), "--data", p("extra.safetensors"), "--steps", "1"], "tensor 'z' is not an input of the model"),
        ([p("lin.onnx"), "--data", p("dtype.safetensors"), "--steps", "1"], "input 'x' is f64, expected f32"),
        ([p("lin.onnx"), "--data", p("shape.safetensors"), "--steps", "1"], "input 'x' has shape f32[4, 5], expected f32[4, 3]"),
        ([p("lin.onnx"), "--data", p("missing.safetensors"), "--steps", "1"], "no tensor for model input 't'"),
        ([p("lin.onnx"), "--data", p("nowhere.safetensors"), "--steps", "1"], "nowhere.safetensors: cannot open"),
        (base + ["--load", p("data.safetensors")], "no tensor 'w' (the checkpoint is not of this model)"),
    ]
    failures = 0
    for args, want in cases:
        r = train(*args)
        lines = r.stderr.strip().splitlines()
        if r.returncode == 0 or len(lines) != 1 or want not in lines[0]:
            failures += 1
            print(f"FAIL {args[1:]}: status {r.returncode}, stderr {r.stderr!r}, expected {want!r}")
    r = train(p("nan.onnx"), "--data", p("neg.safetensors"), "--steps", "3")
    out = [json.loads(l) for l in r.stdout.splitlines()]
    if r.returncode == 0 or len(out) != 1 or out[0]["loss"] is not None or "NaN" not in out[0]["error"]:
        failures += 1
        print(f"FAIL nan: status {r.returncode}, stdout {r.stdout!r}")
    # resume: 3 + 3 steps from a checkpoint equal 6 steps in one run (steps and batches continue)
    flags = ["--optimizer", "adam", "--lr", "0.05"]
    whole = train(*base[:-1], "6", *flags)
    first = train(*base[:-1], "3", *flags, "--save", p("ckpt.safetensors"))
    second = train(*base[:-1], "3", *flags, "--load", p("ckpt.safetensors"))
    losses = lambda r: [(j["step"], j["loss"]) for j in map(json.loads, r.stdout.splitlines())]
    if whole.returncode or first.returncode or second.returncode or losses(whole) != losses(first) + losses(second):
        failures += 1
        print(f"FAIL resume: {losses(whole)} vs {losses(first)} + {losses(second)} {second.stderr}")
    # dropout draws from (seed, step): two runs agree, successive steps on the same batch differ
    runs = [train(p("drop.onnx"), "--data", p("same.safetensors"), "--steps", "3", "--lr", "0") for _ in range(2)]
    drops = [losses(r) for r in runs]
    values = [l for _, l in drops[0]]
    # 192 ones: each kept element counts 2 (scaled by 1 / (1 - 0.5)), so sums are even and near 192
    if any(r.returncode for r in runs) or drops[0] != drops[1] or len(set(values)) != 3 or not all(0 < v < 384 and v % 2 == 0 for v in values):
        failures += 1
        print(f"FAIL dropout: {drops}")
    # the compiled .so draws the same dropout masks as the interpreter
    so = p("drop.so")
    compiled = subprocess.run([sgc, "compile", p("drop.onnx"), "-o", so, "--target", "cpu", "--lr", "0"], capture_output=True, text=True)
    run_so = train(so, "--data", p("same.safetensors"), "--steps", "3")
    if compiled.returncode or run_so.returncode or losses(run_so) != drops[0]:
        failures += 1
        print(f"FAIL compiled dropout: {compiled.stderr} {run_so.stderr} {losses(run_so) if not run_so.returncode else ''}")
    print(f"train cli: {len(cases) + 4 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
