// Dispatch of node lowerings (see LowerOps.h).
#include "codegen/kir/LowerOps.h"

#include "codegen/kir/Builder.h"
#include "codegen/kir/Lower.h"

namespace sgc::kir {

namespace {

Expected<std::vector<Kernel>> one(Expected<Kernel> k) {
  if (!k) return k.takeError();
  return std::vector<Kernel>{std::move(*k)};
}

} // namespace

Expected<std::vector<Kernel>> lowerElementwiseNode(const std::string& name, const ir::Node& n) { return one(lowerElementwise(name, {&n})); }
Expected<std::vector<Kernel>> lowerReduceNode(const std::string& name, const ir::Node& n) { return one(lowerReduce(name, n)); }

/// One rank: each reduced gradient is the gradient itself.
Expected<std::vector<Kernel>> lowerAllReduce(const std::string& name, const ir::Node& n) {
  std::vector<Kernel> ks;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    Builder b(name + "_" + std::to_string(i));
    int e = b.newLoopVar();
    const ir::Value *in = n.inputs[i], *out = n.outputs[i];
    ks.push_back(b.finish(loop(e, out->type.staticNumel().value(), true, {b.st(out, loopVar(e), b.ld(in, loopVar(e)))})));
  }
  return ks;
}

Expected<std::vector<Kernel>> lowerRuntime(const std::string&, const ir::Node& n) {
  return makeError(ir::describe(n) + ": run by the runtime (a collective), not by kernels");
}

Expected<std::vector<Kernel>> lowerNone(const std::string&, const ir::Node& n) {
  return makeError(ir::describe(n) + ": code generation for " + std::string(ir::opName(n.op)) + " is not built: " +
                   std::string(ir::opInfo(n.op).notGenerated));
}

/// An op that a pass rewrites into others before code generation; met here, it could not be.
Expected<std::vector<Kernel>> lowerExpanded(const std::string&, const ir::Node& n) {
  return makeError(ir::describe(n) + ": " + std::string(ir::opInfo(n.op).notGenerated));
}

// The lowering of each op, as Ops.def's Lower column names it.
#define OP(N, MinI, MaxI, MinO, MaxO, Class, Rule, Interp, Grad, Lower, ...) \
  Expected<std::vector<Kernel>> lower##Lower(const std::string& name, const ir::Node& n);
#define lowerElementwise lowerElementwiseNode
#define lowerReduce lowerReduceNode
#include "ir/Ops.def"

Expected<std::vector<Kernel>> lowerNode(const std::string& name, const ir::Node& n) {
  if (ir::opInfo(n.op).expanded) return lowerExpanded(name, n); // whatever its shapes: the pass did not take it
  for (const ir::Value* v : n.inputs)
    if (v && !v->type.isStatic()) return makeError(ir::describe(n) + ": input %" + v->name + " has no static shape");
  for (const ir::Value* v : n.outputs)
    if (v && !v->type.isStatic()) return makeError(ir::describe(n) + ": result %" + v->name + " has no static shape");
  switch (n.op) {
#define OP(N, MinI, MaxI, MinO, MaxO, Class, Rule, Interp, Grad, Lower, ...) \
  case ir::Op::N: return lower##Lower(name, n);
#include "ir/Ops.def"
  }
  return makeError(ir::describe(n) + ": an op outside the table");
}
#undef lowerElementwise
#undef lowerReduce

} // namespace sgc::kir
