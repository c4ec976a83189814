// The bind-dims pass (see BindDims.h).
#include "ir/passes/BindDims.h"

#include "ir/passes/InferShapes.h"

#include <set>

namespace sgc::ir {

Error bindDims(Graph& g, const std::map<std::string, int64_t>& dims) {
  std::set<std::string> used;
  for (Value* v : g.inputs)
    for (Dim& d : v->type.dims) {
      if (!d.isSymbolic()) continue;
      auto it = dims.find(d.symbol);
      if (it == dims.end()) continue;
      if (it->second < 0) return makeError("dim " + d.symbol + " must be non-negative");
      used.insert(d.symbol);
      d = Dim::of(it->second);
    }
  for (auto& [name, size] : dims)
    if (!used.count(name)) return makeError("no input has a dim named " + name);
  return inferShapes(g);
}

} // namespace sgc::ir
