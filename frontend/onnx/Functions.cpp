// ONNX model-local functions (ModelProto.functions), inlined where they are
// called: the body's nodes are imported in the caller's place, its values
// renamed under the calling node's name, its formal inputs bound to the
// call's values, its attribute references (ref_attr_name) to the call's
// attributes, and its outputs bound to the call's outputs. A function may
// call others; a recursion deeper than kMaxDepth is an error.
#include "frontend/onnx/Internal.h"

namespace sgc::onnx_import {
namespace {

constexpr int kMaxDepth = 32;

std::string key(const std::string& domain, const std::string& name) { return domain + "::" + name; }

/// The body node `b` for a call of `call` whose values live under `prefix`.
onnx::NodeProto instantiate(const onnx::NodeProto& b, const onnx::NodeProto& call, const std::string& prefix) {
  onnx::NodeProto out = b;
  out.set_name(prefix + (b.name().empty() ? b.op_type() : b.name()));
  for (auto& in : *out.mutable_input())
    if (!in.empty()) in = prefix + in;
  for (auto& o : *out.mutable_output())
    if (!o.empty()) o = prefix + o;
  out.clear_attribute();
  for (const auto& a : b.attribute()) {
    if (a.ref_attr_name().empty()) {
      *out.add_attribute() = a;
      continue;
    }
    for (const auto& given : call.attribute()) // an unset reference leaves the attribute out (its default applies)
      if (given.name() == a.ref_attr_name()) {
        onnx::AttributeProto v = given;
        v.set_name(a.name());
        *out.add_attribute() = v;
      }
  }
  return out;
}

} // namespace

void registerFunctions(ImportCtx& c, const onnx::ModelProto& m) {
  for (const auto& f : m.functions()) c.functions[key(f.domain(), f.name())] = &f;
}

bool isFunctionCall(const ImportCtx& c, const onnx::NodeProto& n) { return c.functions.count(key(n.domain(), n.op_type())) != 0; }

Error importFunctionCall(ImportCtx& c, const onnx::NodeProto& n, const std::string& name) {
  const onnx::FunctionProto& f = *c.functions.at(key(n.domain(), n.op_type()));
  if (++c.functionDepth > kMaxDepth) return c.fail("functions call each other more than " + std::to_string(kMaxDepth) + " deep");
  if (n.input_size() > f.input_size() || n.output_size() > f.output_size())
    return c.fail("more inputs or outputs than function " + f.name() + " has");
  std::string prefix = name + "/";
  for (int i = 0; i < f.input_size(); ++i) { // formal inputs: the call's values (an absent one stays absent)
    if (i >= n.input_size() || n.input(i).empty()) continue;
    auto it = c.values.find(n.input(i));
    if (it == c.values.end()) return c.fail("input '" + n.input(i) + "' is not defined");
    c.values[prefix + f.input(i)] = it->second;
  }
  int saved = c.opset;
  for (const auto& o : f.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") c.opset = (int)o.version();
  for (int i = 0; i < f.node_size(); ++i) {
    Error e = importNode(c, instantiate(f.node(i), n, prefix), (size_t)i);
    if (e) {
      c.opset = saved;
      return makeError("in function " + f.name() + " called by node '" + name + "': " + errorText(std::move(e)));
    }
  }
  c.opset = saved;
  --c.functionDepth;
  for (int i = 0; i < n.output_size(); ++i) {
    if (n.output(i).empty()) continue;
    auto it = c.values.find(prefix + f.output(i));
    if (it == c.values.end()) return c.fail("function " + f.name() + " does not compute its output '" + f.output(i) + "'");
    c.values[n.output(i)] = it->second;
  }
  return Error::success();
}

} // namespace sgc::onnx_import
