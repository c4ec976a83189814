// Test helper: uniform random values in [-2, 2) for every input of a graph.
#pragma once
#include "ir/Graph.h"

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

} // namespace sgc::ir
