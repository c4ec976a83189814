// Node import: ONNX nodes to IR nodes of the same op, attributes converted,
// and the forms of older opsets rewritten into the IR's (newest) form.
#include "frontend/onnx/Build.h"

namespace sgc::onnx_import {
namespace {

using ir::Attr;
using ir::Op;

Expected<Attr> convertAttr(ImportCtx& c, const onnx::AttributeProto& a) {
  using A = onnx::AttributeProto;
  switch (a.type()) {
  case A::INT: return Attr((int64_t)a.i());
  case A::FLOAT: return Attr((double)a.f());
  case A::STRING: return Attr(a.s());
  case A::INTS: return Attr(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
  case A::FLOATS: return Attr(std::vector<double>(a.floats().begin(), a.floats().end()));
  case A::TENSOR: {
    auto t = decodeTensor(a.t(), c.baseDir, c.label + ": attribute '" + a.name() + "'");
    if (!t) return t.takeError();
    return Attr(std::move(*t));
  }
  default: return c.fail("attribute '" + a.name() + "' has a type sgc does not support (" + std::to_string(a.type()) + ")");
  }
}

ir::Value* constInput(ImportCtx& c, const std::string& base, ir::Tensor t) {
  return c.graph.addConst(c.graph.uniqueName(base), std::move(t));
}

Error importConstant(ImportCtx& c, const onnx::NodeProto& n) {
  if (n.output_size() != 1 || n.attribute_size() != 1) return c.fail("expected one output and one attribute");
  const auto& a = n.attribute(0);
  ir::Tensor t;
  if (a.name() == "value") {
    auto d = decodeTensor(a.t(), c.baseDir, c.label + ": value");
    if (!d) return d.takeError();
    t = std::move(*d);
  } else if (a.name() == "value_float") {
    t = ir::Tensor::fromF64(ir::DType::F32, {}, {a.f()});
  } else if (a.name() == "value_floats") {
    t = ir::Tensor::fromF64(ir::DType::F32, {(int64_t)a.floats_size()}, {a.floats().begin(), a.floats().end()});
  } else if (a.name() == "value_int") {
    t = ir::Tensor::scalarI64(a.i());
  } else if (a.name() == "value_ints") {
    t = ir::Tensor::fromI64(ir::DType::I64, {(int64_t)a.ints_size()}, {a.ints().begin(), a.ints().end()});
  } else {
    return c.fail("attribute '" + a.name() + "' is not supported");
  }
  if (c.graph.findValue(n.output(0))) return c.fail("output '" + n.output(0) + "' is defined twice");
  c.values[n.output(0)] = c.graph.addConst(n.output(0), std::move(t));
  return Error::success();
}

/// Moves an integer-list attribute that older opsets used into input `index`.
void liftInts(ImportCtx& c, std::map<std::string, Attr>& attrs, const char* attr, std::vector<ir::Value*>& ins,
              size_t index, const std::string& nodeName) {
  auto it = attrs.find(attr);
  if (it == attrs.end()) return;
  auto* v = std::get_if<std::vector<int64_t>>(&it->second);
  if (v) {
    if (ins.size() <= index) ins.resize(index + 1, nullptr);
    ins[index] = constInput(c, nodeName + "/" + attr, ir::Tensor::fromI64(ir::DType::I64, {(int64_t)v->size()}, *v));
  }
  attrs.erase(it);
}

/// Moves a float attribute of older opsets into input `index`, as a scalar of `like`'s dtype
/// (which the importer knows for graph inputs and initializers; float32 otherwise).
Error liftFloat(ImportCtx& c, std::map<std::string, Attr>& attrs, const char* attr, std::vector<ir::Value*>& ins, size_t index,
                const std::string& nodeName, const ir::Value* like) {
  auto it = attrs.find(attr);
  if (it == attrs.end()) return Error::success();
  auto* v = std::get_if<double>(&it->second);
  if (!v) return c.fail(std::string("attribute '") + attr + "' must be a float");
  bool known = like && like->type.dtype != ir::DType::Undefined;
  if (ins.size() <= index) ins.resize(index + 1, nullptr);
  ins[index] = constInput(c, nodeName + "/" + attr, ir::Tensor::fromF64(known ? like->type.dtype : ir::DType::F64, {}, {*v}));
  if (!known && like) // a node's result: its dtype is known after shape inference
    ins[index] = c.graph.addNode(Op::CastLike, {ins[index], const_cast<ir::Value*>(like)}, 1, nodeName + "/" + attr)->outputs[0];
  attrs.erase(it);
  return Error::success();
}

bool isReduce(Op op) {
  switch (op) {
  case Op::ReduceSum: case Op::ReduceMean: case Op::ReduceMax: case Op::ReduceMin: case Op::ReduceProd:
  case Op::ReduceL1: case Op::ReduceL2: case Op::ReduceLogSum: case Op::ReduceLogSumExp: case Op::ReduceSumSquare:
    return true;
  default: return false;
  }
}

/// Rewrites older-opset forms (attributes that became inputs) into the IR form.
Error upgrade(ImportCtx& c, Op op, std::map<std::string, Attr>& attrs, std::vector<ir::Value*>& ins, const std::string& name) {
  if (isReduce(op) && c.opset < (op == Op::ReduceSum ? 13 : 18)) liftInts(c, attrs, "axes", ins, 1, name);
  if ((op == Op::Squeeze || op == Op::Unsqueeze) && c.opset < 13) liftInts(c, attrs, "axes", ins, 1, name);
  if (op == Op::Split && c.opset < 13) liftInts(c, attrs, "split", ins, 1, name);
  if (op == Op::Slice && c.opset < 10) {
    liftInts(c, attrs, "starts", ins, 1, name);
    liftInts(c, attrs, "ends", ins, 2, name);
    liftInts(c, attrs, "axes", ins, 3, name);
  }
  const ir::Value* data = ins.empty() ? nullptr : ins[0]; // none: the arity check names the node
  if (op == Op::Pad && c.opset < 11) {
    liftInts(c, attrs, "pads", ins, 1, name);
    if (Error e = liftFloat(c, attrs, "value", ins, 2, name, data)) return e;
  }
  if (op == Op::Clip && c.opset < 11) {
    if (Error e = liftFloat(c, attrs, "min", ins, 1, name, data)) return e;
    if (Error e = liftFloat(c, attrs, "max", ins, 2, name, data)) return e;
  }
  if (op == Op::Dropout && c.opset < 12 && attrs.count("ratio")) {
    auto* rp = std::get_if<double>(&attrs["ratio"]);
    if (!rp) return c.fail("attribute 'ratio' must be a float");
    double r = *rp;
    attrs.erase("ratio");
    ins.resize(std::max<size_t>(ins.size(), 2), nullptr);
    ins[1] = constInput(c, name + "/ratio", ir::Tensor::fromF64(ir::DType::F32, {}, {r}));
  }
  if (op == Op::Cast && attrs.count("to")) {
    auto* code = std::get_if<int64_t>(&attrs["to"]);
    auto t = code ? ir::dtypeFromOnnx((int32_t)*code) : std::nullopt;
    if (!t) return c.fail("attribute 'to': dtype code " + std::to_string(code ? *code : -1) + " is not supported");
    attrs["to"] = Attr(std::string(ir::dtypeName(*t)));
  }
  if (op == Op::Cast || op == Op::CastLike) attrs.erase("saturate");
  if (op == Op::Cast && !attrs.count("to")) return c.fail("attribute 'to' is required");
  return Error::success();
}

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";

/// The ONNX domain of an IR op (Ops.def): "" for the default domain, the training
/// domain for its optimizers, "-" for ops that exist only in sgc's IR.
std::string onnxDomain(Op op) {
  switch (ir::opInfo(op).domain) {
  case ir::OpDomain::Onnx: return "";
  case ir::OpDomain::Training: return kTrainingDomain;
  case ir::OpDomain::Ir: return "-";
  }
  return "-";
}

/// Opset < 13 Softmax family: softmax of the input flattened to 2D at `axis`.
Error importLegacySoftmax(ImportCtx& c, Op op, const std::string& name, ir::Value* x, const std::string& outName,
                          int64_t axis) {
  auto& g = c.graph;
  ir::Node* flat = g.addNode(Op::Flatten, {x}, 1, name + "/flatten");
  flat->attrs["axis"] = Attr(axis);
  ir::Node* sm = g.addNode(op, {flat->outputs[0]}, 1, name);
  sm->attrs["axis"] = Attr(int64_t(1));
  ir::Node* shape = g.addNode(Op::Shape, {x}, 1, name + "/shape");
  ir::Node* back = g.addNode(Op::Reshape, {sm->outputs[0], shape->outputs[0]}, 1, name + "/reshape", {outName});
  c.values[outName] = back->outputs[0];
  return Error::success();
}

/// Upsample(X, scales) {mode}, scales an attribute before opset 9.
Error importUpsample(ImportCtx& c, const onnx::NodeProto& n, const std::string& name) {
  if (n.input_size() < 1 || n.output_size() != 1) return c.fail("expected X (and scales) and one output");
  auto x = c.values.find(n.input(0));
  if (x == c.values.end()) return c.fail("input '" + n.input(0) + "' is not defined");
  ir::Value* scales = nullptr;
  std::string mode = "nearest";
  for (const auto& a : n.attribute()) {
    if (a.name() == "mode") mode = a.s();
    if (a.name() == "scales")
      scales = constInput(c, name + "/scales", ir::Tensor::fromF64(ir::DType::F32, {(int64_t)a.floats_size()}, {a.floats().begin(), a.floats().end()}));
  }
  if (!scales && n.input_size() > 1) {
    auto s = c.values.find(n.input(1));
    if (s == c.values.end()) return c.fail("input '" + n.input(1) + "' is not defined");
    scales = s->second;
  }
  if (!scales) return c.fail("scales are required");
  ir::Value* roi = constInput(c, name + "/roi", ir::Tensor::fromF64(ir::DType::F32, {0}, {}));
  ir::Node* r = c.graph.addNode(Op::Resize, {x->second, roi, scales}, 1, name, {n.output(0)});
  r->attrs["mode"] = mode == "bilinear" ? std::string("linear") : mode;
  r->attrs["coordinate_transformation_mode"] = std::string("asymmetric");
  r->attrs["nearest_mode"] = std::string("floor");
  c.values[n.output(0)] = r->outputs[0];
  return Error::success();
}

} // namespace

Error importNode(ImportCtx& c, const onnx::NodeProto& n, size_t index) {
  std::string name = n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name();
  c.label = c.file + ": node '" + name + "' (" + n.op_type() + ")";
  if (isGradientNode(n)) return importGradientNode(c, n);
  if (isFunctionCall(c, n)) return importFunctionCall(c, n, name);
  if (isSequenceOp(n)) return importSequenceOp(c, n, name);
  if (isDecomposed(n)) return importDecomposed(c, n, name);
  std::string domain = n.domain() == "ai.onnx" ? "" : n.domain();
  if (!domain.empty() && domain != kTrainingDomain) return c.fail("ops of domain '" + domain + "' are not supported");
  if (domain.empty() && c.opset == 0) return c.fail("the model imports no opset of the default ONNX domain");
  if (domain.empty() && n.op_type() == "Constant") return importConstant(c, n);
  // Upsample (opsets 7 to 9) is Resize with asymmetric coordinates (nearest: the floor).
  if (domain.empty() && n.op_type() == "Upsample") return importUpsample(c, n, name);
  // Scatter (opsets 9 and 10) is ScatterElements under its old name.
  auto op = domain.empty() && n.op_type() == "Scatter" ? std::optional<Op>(Op::ScatterElements) : ir::opFromName(n.op_type());
  if (!op || onnxDomain(*op) != domain)
    return c.fail("op " + n.op_type() + (domain.empty() ? " (opset " + std::to_string(c.opset) + ")" : " of domain '" + domain + "'") +
                  " is not supported");
  if (ir::opInfo(*op).domain == ir::OpDomain::Onnx && c.opset < ir::opInfo(*op).since && n.op_type() != "Scatter") return c.fail("op " + n.op_type() + " does not exist in opset " + std::to_string(c.opset));
  std::map<std::string, Attr> attrs;
  for (const auto& a : n.attribute()) {
    auto v = convertAttr(c, a);
    if (!v) return v.takeError();
    attrs[a.name()] = std::move(*v);
  }
  std::vector<ir::Value*> ins;
  for (const auto& in : n.input()) {
    if (in.empty()) {
      ins.push_back(nullptr);
      continue;
    }
    auto it = c.values.find(in);
    if (it == c.values.end() && c.sequences.count(in)) return c.fail("input '" + in + "' is a sequence; " + n.op_type() + " takes a tensor");
    if (it == c.values.end()) return c.fail("input '" + in + "' is not defined");
    ins.push_back(it->second);
  }
  while (!ins.empty() && !ins.back()) ins.pop_back();
  if (Error e = upgrade(c, *op, attrs, ins, name)) return e;
  std::vector<std::string> outs(n.output().begin(), n.output().end());
  while (!outs.empty() && outs.back().empty()) outs.pop_back();
  for (const std::string& o : outs)
    if (!o.empty() && c.graph.findValue(o)) return c.fail("output '" + o + "' is defined twice");
  const ir::OpInfo& info = ir::opInfo(*op);
  if ((int)ins.size() < info.minInputs || (info.maxInputs >= 0 && (int)ins.size() > info.maxInputs))
    return c.fail(std::to_string(ins.size()) + " inputs, expected " + std::to_string(info.minInputs) +
                  (info.maxInputs < 0 ? " or more" : " to " + std::to_string(info.maxInputs)));
  if ((int)outs.size() < info.minOutputs || (info.maxOutputs >= 0 && (int)outs.size() > info.maxOutputs))
    return c.fail(std::to_string(outs.size()) + " outputs, expected " + std::to_string(info.minOutputs) +
                  (info.maxOutputs < 0 ? " or more" : " to " + std::to_string(info.maxOutputs)));
  for (int i = 0; i < info.minInputs; ++i)
    if (!ins[i]) return c.fail("required input " + std::to_string(i) + " is missing");
  bool legacySoftmax = (*op == Op::Softmax || *op == Op::LogSoftmax || *op == Op::Hardmax) && c.opset < 13;
  if (legacySoftmax) {
    auto* axis = attrs.count("axis") ? std::get_if<int64_t>(&attrs["axis"]) : nullptr;
    if (attrs.count("axis") && !axis) return c.fail("attribute 'axis' must be an integer");
    return importLegacySoftmax(c, *op, name, ins[0], outs[0], axis ? *axis : 1);
  }
  ir::Node* node = c.graph.addNode(*op, ins, (int)outs.size(), name, outs);
  node->attrs = std::move(attrs);
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].empty()) node->outputs[i] = nullptr;
    else c.values[outs[i]] = node->outputs[i];
  }
  return Error::success();
}

} // namespace sgc::onnx_import
