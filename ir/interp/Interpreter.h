// The reference interpreter: runs any IR graph on the CPU, one node at a
// time, computing floating-point results in float64 and rounding to each
// result's dtype. Simple and obviously right rather than fast: it is the
// numeric oracle that passes and compiled code are checked against.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

#include <map>
#include <string>
#include <vector>

namespace sgc::ir {

/// Evaluates one node on concrete inputs (nullptr for absent optionals).
Expected<std::vector<Tensor>> evalNode(const Node& n, const std::vector<const Tensor*>& inputs);

/// Checks that `t` fits the declared type of graph input `v` (dtype, rank,
/// static dims); `symbols` binds symbolic dims across inputs.
Error checkInput(const Value& v, const Tensor& t, std::map<std::string, int64_t>& symbols);

/// Runs the graph on the named inputs and returns the graph outputs by name.
Expected<std::map<std::string, Tensor>> run(const Graph& g, const std::map<std::string, Tensor>& inputs);

/// Runs one step of a graph with updates (a training step): returns the
/// outputs, then gives each updated parameter or state value its new data.
/// On error nothing is updated.
Expected<std::map<std::string, Tensor>> runStep(Graph& g, const std::map<std::string, Tensor>& inputs);

} // namespace sgc::ir
