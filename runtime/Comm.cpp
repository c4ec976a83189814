// What all communicators share (see Comm.h).
#include "runtime/Comm.h"

#include "runtime/Safetensors.h"

#include <algorithm>

namespace sgc::rt {

Span tensorSpan(const Program& p, int id, uint64_t address) {
  const TensorDesc& t = p.tensors[id];
  return {address, t.bytes / stDTypeSize(t.dtype), t.dtype};
}

std::vector<Span> contiguousSpans(const Program& p, const std::vector<int>& ids, const std::vector<uint64_t>& address) {
  std::vector<int> order(ids);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return address[a] < address[b]; });
  std::vector<Span> spans;
  uint64_t end = 0;
  for (int id : order) {
    const TensorDesc& t = p.tensors[id];
    uint64_t size = stDTypeSize(t.dtype), gap = address[id] - end;
    // Merge across padding only: no tensor outside `ids` may lie in the gap.
    bool padding = !spans.empty() && address[id] >= end && gap < p.alignment && gap % size == 0 && spans.back().dtype == t.dtype;
    for (size_t o = 0; padding && gap && o < p.tensors.size(); ++o)
      if (std::find(ids.begin(), ids.end(), (int)o) == ids.end() && address[o] < address[id] && address[o] + p.tensors[o].bytes > end)
        padding = false;
    if (padding) spans.back().count += (gap + t.bytes) / size;
    else spans.push_back(tensorSpan(p, id, address[id]));
    end = std::max(end, address[id] + t.bytes);
  }
  return spans;
}

std::vector<std::vector<Span>> allReduceSpans(const Program& p, const std::vector<uint64_t>& address) {
  std::vector<std::vector<Span>> spans;
  for (const Launch& l : p.launches)
    spans.push_back(l.collective && l.collective->op == "allreduce" ? contiguousSpans(p, l.collective->tensors, address) : std::vector<Span>{});
  return spans;
}

} // namespace sgc::rt
