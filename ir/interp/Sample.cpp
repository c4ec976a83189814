// Sample: the reference of a decode step's token choice (ir/Ops.def). It sorts each row; the
// kernels (codegen/kir/LowerSample.cpp) find the same thresholds by bisection instead, and
// draw the same Gumbel noise, in float32 as here.
#include "ir/interp/Kernels.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sgc::ir {

/// The Gumbel noise of token v in the row of (seed, counter): -log(-log(u)), u uniform in (0, 1)
/// from the top 23 bits of splitmix64 (as Dropout's generator), in float32.
float sampleGumbel(uint64_t seed, uint64_t counter, uint64_t v) {
  uint64_t z = (seed * 0x100000001b3ull ^ counter) * 0x9e3779b97f4a7c15ull + v + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  float u = ((float)(z >> 41) + 0.5f) * 0x1.0p-23f;
  return -std::log(-std::log(u));
}

namespace {

/// The kept logits' threshold of one row: x >= it survives top_k, then top_p.
float sampleThreshold(const std::vector<float>& x, float temperature, int64_t topK, float topP) {
  int64_t V = (int64_t)x.size();
  std::vector<int64_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x[a] > x[b]; });
  float thr = -INFINITY;
  if (topK > 0 && topK < V) thr = x[order[topK - 1]];
  if (topP < 1) {
    float top = x[order[0]];
    double z = 0, acc = 0;
    for (int64_t v : order)
      if (x[v] >= thr) z += std::exp((double)(x[v] - top) / temperature);
    for (int64_t v : order) { // the smallest prefix whose mass reaches top_p; its last value is the threshold
      if (x[v] < thr) break;
      acc += std::exp((double)(x[v] - top) / temperature);
      if (acc >= topP * z) {
        thr = x[v];
        break;
      }
    }
  }
  return thr;
}

} // namespace

Error evalSample(EvalCtx& c) {
  const Tensor& logits = *c.in[0];
  int64_t V = logits.shape.back(), rows = V ? logits.numel() / V : 0;
  if (V == 0) return c.fail("cannot sample from an empty vocabulary");
  std::vector<float> x(V);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t v = 0; v < V; ++v) x[v] = (float)logits.getF(r * V + v);
    float temperature = (float)c.in[1]->getF(r), topP = (float)c.in[3]->getF(r);
    int64_t topK = c.in[2]->getI(r);
    uint64_t seed = (uint64_t)c.in[4]->getI(r), counter = (uint64_t)c.in[5]->getI(r);
    bool sampled = temperature > 0;
    float thr = sampled ? sampleThreshold(x, temperature, topK, topP) : -INFINITY;
    int64_t best = 0;
    float bestScore = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      if (!(x[v] >= thr)) continue;
      float score = sampled ? x[v] / temperature + sampleGumbel(seed, counter, (uint64_t)v) : x[v];
      if (score > bestScore) best = v, bestScore = score;
    }
    c.out[0].setI(r, best);
  }
  return Error::success();
}

} // namespace sgc::ir
