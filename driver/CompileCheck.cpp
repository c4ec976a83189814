// What `sgc inspect MODEL` says of a model's compilation before the user
// tries: it builds the training step as `sgc compile` would with default
// flags (or, for a model without a loss, takes the graph as it is), runs
// the passes that rewrite ops for code generation, and lowers every node to
// kernels, listing each node the code generator would refuse with its error.
#include "driver/CompileCheck.h"

#include "codegen/kir/LowerOps.h"
#include "ir/passes/BindDims.h"
#include "ir/passes/ExpandResize.h"
#include "ir/passes/InferShapes.h"
#include "ir/training/TrainingStep.h"

#include <cstdio>
#include <set>

namespace sgc::driver {
namespace {

/// The errors of the nodes of `g` that do not lower to kernels (collectives run in the runtime).
std::vector<std::string> refusedNodes(ir::Graph& g) {
  if (Error e = ir::expandResize(g)) return {errorText(std::move(e))};
  std::vector<std::string> refused;
  for (const auto& n : g.nodes()) {
    if (ir::opClass(n->op) == ir::OpClass::Collective) continue;
    auto ks = kir::lowerNode("check", *n);
    if (!ks) refused.push_back(errorText(ks.takeError()));
  }
  return refused;
}

/// The symbolic dims that some input still has.
std::set<std::string> symbolicDims(const ir::Graph& g) {
  std::set<std::string> dims;
  for (const ir::Value* v : g.inputs)
    for (const ir::Dim& d : v->type.dims)
      if (!d.isStatic()) dims.insert(d.isSymbolic() ? d.symbol : "?");
  return dims;
}

} // namespace

int printCompileCheck(const std::string& path, const std::map<std::string, int64_t>& dims, const std::string& inputTypes) {
  auto g = loadModel(path, inputTypes);
  if (!g) return reportError(g.takeError());
  if (!dims.empty())
    if (Error e = ir::bindDims(**g, dims)) return reportError(path + ": " + errorText(std::move(e)));
  if (Error e = ir::inferShapes(**g)) return printf("compiles: no: %s\n", errorText(std::move(e)).c_str()), 0;
  std::set<std::string> symbolic = symbolicDims(**g);
  if (!symbolic.empty()) {
    std::string names;
    for (const std::string& d : symbolic) names += (names.empty() ? "" : ", ") + d;
    printf("compiles: not as it is: the inputs have symbolic dims (%s); give each a size with --dim, as sgc compile needs\n",
           names.c_str());
    return 0;
  }
  std::string what = "the training step (sgc compile's default flags)";
  ir::TrainingOptions opts; // sgc compile's defaults (SGD; the optimizer's kernels compile alike)
  if (Error e = ir::buildTrainingStep(**g, opts)) {
    std::string why = errorText(std::move(e));
    printf("training step: not built: %s\n", why.c_str());
    g = loadModel(path, inputTypes); // the forward graph alone, as a decoding step would compile it
    if (!g) return reportError(g.takeError());
    if (!dims.empty()) llvm::consumeError(ir::bindDims(**g, dims));
    if (Error e2 = ir::inferShapes(**g)) return reportError(std::move(e2));
    what = "the forward graph";
  }
  std::vector<std::string> refused = refusedNodes(**g);
  if (refused.empty()) {
    printf("compiles: yes: every node of %s lowers to kernels for the CPU and the GPU (%zu nodes)\n", what.c_str(),
           (**g).nodes().size());
    return 0;
  }
  printf("compiles: no: %zu of the %zu nodes of %s will not compile:\n", refused.size(), (**g).nodes().size(), what.c_str());
  for (const std::string& r : refused) printf("  %s\n", r.c_str());
  return 0;
}

} // namespace sgc::driver
