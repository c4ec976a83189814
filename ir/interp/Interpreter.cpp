// Graph evaluation and kernel dispatch from the op table.
#include "ir/interp/Interpreter.h"

#include "ir/interp/Kernels.h"

#include <algorithm>
#include <new>
#include <cmath>

namespace sgc::ir {

#define OP(N, MinI, MaxI, MinO, MaxO, Class, Rule, Kernel, Grad, ...) Error eval##Kernel(EvalCtx&);
#include "ir/Ops.def"

namespace {
Error dispatch(EvalCtx& c) {
  switch (c.node.op) {
#define OP(N, MinI, MaxI, MinO, MaxO, Class, Rule, Kernel, Grad, ...) \
  case Op::N: return eval##Kernel(c);
#include "ir/Ops.def"
  }
  return c.fail("no kernel");
}
} // namespace

std::vector<int64_t> stridesOf(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

void forEachIndex(const std::vector<int64_t>& shape, const std::function<void(const std::vector<int64_t>&)>& fn) {
  for (int64_t d : shape)
    if (d == 0) return;
  std::vector<int64_t> idx(shape.size(), 0);
  while (true) {
    fn(idx);
    size_t i = shape.size();
    while (i > 0) {
      if (++idx[i - 1] < shape[i - 1]) break;
      idx[--i] = 0;
    }
    if (i == 0) return;
  }
}

int64_t broadcastOffset(const std::vector<int64_t>& idx, const std::vector<int64_t>& from) {
  int64_t off = 0, stride = 1;
  size_t lead = idx.size() - from.size();
  for (size_t i = from.size(); i-- > 0;) {
    if (from[i] != 1) off += idx[lead + i] * stride;
    stride *= from[i];
  }
  return off;
}

std::vector<int64_t> broadcastOffsets(const std::vector<int64_t>& out, const std::vector<int64_t>& in) {
  std::vector<int64_t> offs;
  offs.reserve((size_t)checkedNumel(out).value_or(0));
  forEachIndex(out, [&](const std::vector<int64_t>& idx) { offs.push_back(broadcastOffset(idx, in)); });
  return offs;
}

int64_t toInt(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}

Expected<std::vector<Tensor>> evalNode(const Node& n, const std::vector<const Tensor*>& inputs) {
  InferCtx ic{n, {}, inputs, {}};
  for (const Tensor* t : inputs) ic.in.push_back(t ? Type::of(t->dtype, t->shape) : Type{});
  if (Error e = inferNode(ic)) return e;
  EvalCtx ec{n, inputs, {}, &ic};
  try {
    for (const Type& t : ic.out) {
      if (!t.isStatic() || t.dtype == DType::Undefined) return ec.fail("result shape is not determined by the inputs");
      ec.out.emplace_back(t.dtype, t.shape());
    }
    if (Error e = dispatch(ec)) return e;
  } catch (const std::bad_alloc&) { // a result (or a kernel's scratch) larger than this machine's memory
    std::string results;
    for (const Type& t : ic.out) results += (results.empty() ? "" : ", ") + toString(t);
    return ec.fail("out of memory evaluating it (results " + results + ")");
  }
  return std::move(ec.out);
}

Error checkInput(const Value& v, const Tensor& t, std::map<std::string, int64_t>& symbols) {
  std::string what = "input '" + v.name + "'";
  if (t.dtype != v.type.dtype)
    return makeError(what + " is " + std::string(dtypeName(t.dtype)) + ", expected " + std::string(dtypeName(v.type.dtype)));
  if (!v.type.ranked) return Error::success();
  if (t.rank() != v.type.rank())
    return makeError(what + " has shape " + toString(Type::of(t.dtype, t.shape)) + ", expected " + toString(v.type));
  for (int64_t i = 0; i < t.rank(); ++i) {
    const Dim& d = v.type.dims[i];
    bool ok = true;
    if (d.isStatic()) ok = d.value == t.shape[i];
    else if (d.isSymbolic()) ok = symbols.emplace(d.symbol, t.shape[i]).first->second == t.shape[i];
    if (!ok)
      return makeError(what + " has shape " + toString(Type::of(t.dtype, t.shape)) + ", expected " + toString(v.type) +
                       (d.isSymbolic() ? " with " + d.symbol + " = " + std::to_string(symbols[d.symbol]) : ""));
  }
  return Error::success();
}

namespace {

/// Evaluates the graph and returns the tensors of `wanted`, in order.
Expected<std::vector<Tensor>> evaluate(const Graph& g, const std::map<std::string, Tensor>& inputs,
                                       const std::vector<const Value*>& wanted) {
  std::map<const Value*, const Tensor*> env;
  std::map<std::string, int64_t> symbols;
  for (const Value* v : g.inputs) {
    auto it = inputs.find(v->name);
    if (it == inputs.end()) return makeError("missing input '" + v->name + "'");
    if (Error e = checkInput(*v, it->second, symbols)) return e;
    env[v] = &it->second;
  }
  for (auto& [name, t] : inputs)
    if (!g.findValue(name) || g.findValue(name)->kind != ValueKind::Input) return makeError("'" + name + "' is not an input of the graph");
  for (const auto* list : {&g.params, &g.state, &g.consts})
    for (const Value* v : *list) env[v] = v->data.get();
  std::vector<std::unique_ptr<Tensor>> results;
  for (const auto& n : g.nodes()) {
    std::vector<const Tensor*> ins;
    for (const Value* v : n->inputs) ins.push_back(v ? env.at(v) : nullptr);
    auto outs = evalNode(*n, ins);
    if (!outs) return outs.takeError();
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      if (!n->outputs[i]) continue;
      results.push_back(std::make_unique<Tensor>(std::move((*outs)[i])));
      env[n->outputs[i]] = results.back().get();
    }
  }
  std::vector<Tensor> out;
  for (const Value* v : wanted) out.push_back(*env.at(v));
  return out;
}

} // namespace

Expected<std::map<std::string, Tensor>> run(const Graph& g, const std::map<std::string, Tensor>& inputs) {
  auto vals = evaluate(g, inputs, {g.outputs.begin(), g.outputs.end()});
  if (!vals) return vals.takeError();
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < g.outputs.size(); ++i) out[g.outputs[i]->name] = std::move((*vals)[i]);
  return out;
}

Expected<std::map<std::string, Tensor>> runStep(Graph& g, const std::map<std::string, Tensor>& inputs) {
  std::vector<const Value*> wanted(g.outputs.begin(), g.outputs.end());
  for (auto& u : g.updates) wanted.push_back(u.second);
  auto vals = evaluate(g, inputs, wanted);
  if (!vals) return vals.takeError();
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < g.outputs.size(); ++i) out[g.outputs[i]->name] = (*vals)[i];
  for (size_t i = 0; i < g.updates.size(); ++i)
    g.updates[i].first->data = std::make_shared<const Tensor>(std::move((*vals)[g.outputs.size() + i]));
  return out;
}

} // namespace sgc::ir
