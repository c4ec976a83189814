// The importer's builder for decompositions (see Build.h).
#include "frontend/onnx/Build.h"

#include "ir/passes/InferShapes.h"

namespace sgc::onnx_import {

ir::Value* Build::op(ir::Op o, std::vector<ir::Value*> ins, std::map<std::string, ir::Attr> attrs, const std::string& out) {
  ir::Node* n = c.graph.addNode(o, std::move(ins), 1, name + "/" + std::string(ir::opName(o)), out.empty() ? std::vector<std::string>{} : std::vector<std::string>{out});
  n->attrs = std::move(attrs);
  return n->outputs[0];
}

std::vector<ir::Value*> Build::ops(ir::Op o, std::vector<ir::Value*> ins, int outputs, std::map<std::string, ir::Attr> attrs) {
  ir::Node* n = c.graph.addNode(o, std::move(ins), outputs, name + "/" + std::string(ir::opName(o)));
  n->attrs = std::move(attrs);
  return n->outputs;
}

ir::Value* Build::ints(const std::vector<int64_t>& v) {
  return c.graph.addConst(c.graph.uniqueName(name + "/ints"), ir::Tensor::fromI64(ir::DType::I64, {(int64_t)v.size()}, v));
}

ir::Value* Build::int64(int64_t v) { return c.graph.addConst(c.graph.uniqueName(name + "/int"), ir::Tensor::scalarI64(v)); }

ir::Value* Build::scalarLike(double v, ir::Value* like) {
  ir::Value* s = c.graph.addConst(c.graph.uniqueName(name + "/scalar"), ir::Tensor::fromF64(ir::DType::F64, {}, {v}));
  return op(ir::Op::CastLike, {s, like});
}

Expected<std::vector<int64_t>> Build::shape(ir::Value* v) {
  if (v->type.isStatic()) return v->type.shape(); // known already: no need to infer the graph again
  if (Error e = ir::inferShapes(c.graph)) return e;
  if (!v->type.isStatic()) return c.fail("the shape of %" + v->name + " (" + ir::toString(v->type) + ") is not static when the model is read");
  return v->type.shape();
}

Expected<std::vector<int64_t>> Build::dims(ir::Value* v) {
  if (!v->type.isStatic())
    if (Error e = ir::inferShapes(c.graph)) return e;
  if (!v->type.ranked) return c.fail("the rank of %" + v->name + " is not known when the model is read");
  std::vector<int64_t> out;
  for (const ir::Dim& d : v->type.dims) out.push_back(d.isStatic() ? d.value : -1);
  return out;
}

ir::Value* Build::dimOf(ir::Value* v, int64_t d) {
  return op(ir::Op::Gather, {op(ir::Op::Shape, {v}), ints({d})}, {{"axis", int64_t(0)}});
}

void Build::output(const onnx::NodeProto& n, int i, ir::Value* v) {
  if (i >= n.output_size() || n.output(i).empty()) return;
  c.values[n.output(i)] = op(ir::Op::Identity, {v}, {}, n.output(i));
}

Expected<ir::Value*> inputOf(ImportCtx& c, const onnx::NodeProto& n, int i) {
  if (i >= n.input_size() || n.input(i).empty()) return nullptr;
  auto it = c.values.find(n.input(i));
  if (it == c.values.end()) return c.fail("input '" + n.input(i) + "' is not defined");
  return it->second;
}

Expected<std::vector<ir::Value*>> inputsOf(ImportCtx& c, const onnx::NodeProto& n, int count) {
  std::vector<ir::Value*> in(count, nullptr);
  for (int i = 0; i < count; ++i) {
    auto v = inputOf(c, n, i);
    if (!v) return v.takeError();
    in[i] = *v;
  }
  return in;
}

std::vector<int64_t> intsAttr(const onnx::NodeProto& n, const std::string& name, std::vector<int64_t> def) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return {a.ints().begin(), a.ints().end()};
  return def;
}

std::string stringAttr(const onnx::NodeProto& n, const std::string& name, const std::string& def) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return a.s();
  return def;
}

int64_t intAttr(const onnx::NodeProto& n, const std::string& name, int64_t def) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return a.i();
  return def;
}

double floatAttr(const onnx::NodeProto& n, const std::string& name, double def) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return a.f();
  return def;
}

bool hasAttr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return true;
  return false;
}

} // namespace sgc::onnx_import
