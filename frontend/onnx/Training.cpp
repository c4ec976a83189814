// Import of ONNX's training information (TrainingInfoProto): the
// initialization graph is evaluated once at import and its results bound to
// initializers; the algorithm graph is appended to the model's graph, with
// the ai.onnx.preview.training Gradient op lowered through sgc's autodiff and
// the update bindings becoming the graph's updates (one training step).
#include "frontend/onnx/Internal.h"

#include "ir/autodiff/Autodiff.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"

namespace sgc::onnx_import {
namespace {

Error importGradient(ImportCtx& c, const onnx::NodeProto& n) {
  std::vector<std::string> xs;
  std::string y;
  for (const auto& a : n.attribute()) {
    if (a.name() == "xs") xs.assign(a.strings().begin(), a.strings().end());
    if (a.name() == "y") y = a.s();
  }
  if (xs.empty() || y.empty()) return c.fail("attributes 'xs' and 'y' are required");
  if ((int)xs.size() != n.output_size()) return c.fail("expected one output per name in 'xs'");
  auto find = [&](const std::string& name) { return c.values.count(name) ? c.values[name] : nullptr; };
  ir::Value* target = find(y);
  if (!target) return c.fail("y '" + y + "' is not a value of the model");
  std::vector<ir::Value*> wrt;
  for (const std::string& x : xs) {
    if (!find(x)) return c.fail("xs '" + x + "' is not a value of the model");
    wrt.push_back(find(x));
  }
  if (Error e = ir::inferShapes(c.graph)) return e;
  auto grads = ir::autodiff(c.graph, target, wrt);
  if (!grads) return c.fail(errorText(grads.takeError()));
  for (int i = 0; i < n.output_size(); ++i) {
    ir::Value* gi = (*grads)[wrt[i]];
    if (!gi) { // y does not depend on x: its gradient is zero
      const ir::Type& t = wrt[i]->type;
      if (!t.isStatic()) return c.fail("'" + xs[i] + "' needs a static shape");
      gi = c.graph.addConst(c.graph.uniqueName(xs[i] + ".zero_grad"), ir::Tensor(t.dtype, t.shape()));
    }
    if (c.graph.findValue(n.output(i))) return c.fail("output '" + n.output(i) + "' is defined twice");
    c.values[n.output(i)] = c.graph.addNode(ir::Op::Identity, {gi}, 1, n.name(), {n.output(i)})->outputs[0];
  }
  return Error::success();
}

/// Evaluates the initialization graph and binds its results to parameters.
Error runInitialization(ImportCtx& c, const onnx::TrainingInfoProto& ti) {
  if (!ti.has_initialization() || ti.initialization().node_size() == 0) return Error::success();
  ir::Graph init;
  ImportCtx ic{init, c.file + " (initialization graph)", c.baseDir, c.opset, {}, {}, {}, {}, c.functions, 0};
  if (Error e = importGraphBody(ic, ti.initialization())) return e;
  if (Error e = ir::inferShapes(init)) return e;
  auto values = ir::run(init, {});
  if (!values) return makeError(ic.file + ": " + errorText(values.takeError()));
  for (const auto& b : ti.initialization_binding()) {
    ir::Value* target = c.graph.findValue(b.key());
    if (!target || target->kind != ir::ValueKind::Param)
      return makeError(c.file + ": initialization binding names '" + b.key() + "', which is not a floating-point initializer");
    auto it = values->find(b.value());
    if (it == values->end()) return makeError(c.file + ": initialization binding names '" + b.value() + "', which is not an output of the initialization graph");
    if (it->second.dtype != target->data->dtype || it->second.shape != target->data->shape)
      return makeError(c.file + ": the initialization of '" + b.key() + "' does not match its type " + ir::toString(target->type));
    target->data = std::make_shared<const ir::Tensor>(it->second);
  }
  return Error::success();
}

} // namespace

Error importTrainingInfo(ImportCtx& c, const onnx::ModelProto& m) {
  if (m.training_info_size() == 0) return Error::success();
  if (m.training_info_size() > 1) return makeError(c.file + ": more than one TrainingInfoProto is not supported");
  const onnx::TrainingInfoProto& ti = m.training_info(0);
  if (Error e = runInitialization(c, ti)) return e;
  if (!ti.has_algorithm()) return Error::success();
  if (Error e = importGraphBody(c, ti.algorithm())) return e;
  for (const auto& b : ti.update_binding()) {
    ir::Value* target = c.graph.findValue(b.key());
    if (!target || target->kind != ir::ValueKind::Param)
      return makeError(c.file + ": update binding names '" + b.key() + "', which is not a floating-point initializer");
    auto it = c.values.find(b.value());
    if (it == c.values.end()) return makeError(c.file + ": update binding names '" + b.value() + "', which the algorithm does not produce");
    c.graph.updates.push_back({target, it->second});
  }
  return Error::success();
}

bool isGradientNode(const onnx::NodeProto& n) { return n.domain() == "ai.onnx.preview.training" && n.op_type() == "Gradient"; }

Error importGradientNode(ImportCtx& c, const onnx::NodeProto& n) { return importGradient(c, n); }

} // namespace sgc::onnx_import
