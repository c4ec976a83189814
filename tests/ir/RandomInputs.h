// Test helpers: uniform random values in [-2, 2) for every input of a graph; normal random
// values as an IR text tensor literal.
#pragma once
#include "ir/Graph.h"

#include <cstring>
#include <map>
#include <random>
#include <string>

namespace sgc::ir {

inline std::map<std::string, Tensor> randomInputs(const Graph& g, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  std::map<std::string, Tensor> in;
  for (const Value* v : g.inputs) {
    Tensor t(v->type.dtype, v->type.shape());
    for (int64_t i = 0; i < t.numel(); ++i) t.setF(i, u(rng));
    in.emplace(v->name, std::move(t));
  }
  return in;
}

/// `dense<"0x...">` of n normal floats (scaled by 0.5) from `rng`: a parameter's data in IR text.
inline std::string denseNormal(int n, std::mt19937& rng) {
  std::normal_distribution<float> d(0, 0.5f);
  std::string hex = "dense<\"0x";
  for (int i = 0; i < n; ++i) {
    float f = d(rng);
    unsigned char b[4];
    std::memcpy(b, &f, 4);
    for (unsigned char c : b) {
      const char* digits = "0123456789abcdef";
      hex += digits[c >> 4];
      hex += digits[c & 15];
    }
  }
  return hex + "\">";
}

} // namespace sgc::ir
