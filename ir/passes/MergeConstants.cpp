// Pass merge-constants: see MergeConstants.h.
#include "ir/passes/MergeConstants.h"

#include <functional>
#include <string_view>

namespace sgc::ir {

Error mergeConstants(Graph& g, int* count) {
  // Keyed by the bytes' hash; equal keys are then compared in full. The first constant in the
  // graph's order stays, so the result does not depend on where values lie in memory.
  std::map<size_t, std::vector<Value*>> kept;
  int merged = 0;
  for (Value* c : std::vector<Value*>(g.consts)) {
    if (!c->data || g.untrainable.count(c->name)) continue;
    const Tensor& t = *c->data;
    size_t h = std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size()));
    std::vector<Value*>& same = kept[h];
    Value* first = nullptr; // the kept ones differ from each other: one at most is equal
    for (Value* k : same)
      if (k->type == c->type && *k->data == t) {
        first = k;
        break;
      }
    if (!first) {
      same.push_back(c);
      continue;
    }
    g.replaceAllUses(c, first);
    merged++;
  }
  if (merged) g.removeDeadNodes(); // drops the copies no node reads now
  if (count) *count = merged;
  return Error::success();
}

} // namespace sgc::ir
