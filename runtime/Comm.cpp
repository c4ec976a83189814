// What all communicators share (see Comm.h).
#include "runtime/Comm.h"

#include <algorithm>

namespace sgc::rt {

std::vector<Span> contiguousSpans(const std::vector<int>& ids, const std::vector<uint64_t>& address,
                                  const std::vector<uint64_t>& bytes, const std::vector<std::string>& dtype, uint64_t alignment) {
  std::vector<int> order(ids);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return address[a] < address[b]; });
  std::vector<Span> spans;
  uint64_t end = 0;
  for (int id : order) {
    uint64_t size = dtype[id] == "F64" ? 8 : dtype[id] == "F32" ? 4 : 2;
    uint64_t gap = address[id] - end;
    // Merge across padding only: no tensor outside `ids` may lie in the gap.
    bool padding = !spans.empty() && address[id] >= end && gap < alignment && gap % size == 0 && spans.back().dtype == dtype[id];
    for (size_t t = 0; padding && gap && t < address.size(); ++t)
      if (std::find(ids.begin(), ids.end(), (int)t) == ids.end() && address[t] < address[id] && address[t] + bytes[t] > end) padding = false;
    if (padding) spans.back().count += (gap + bytes[id]) / size;
    else spans.push_back({address[id], bytes[id] / size, dtype[id]});
    end = std::max(end, address[id] + bytes[id]);
  }
  return spans;
}

} // namespace sgc::rt
