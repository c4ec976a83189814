// Structural checks of a Graph: SSA (each value defined once, before use),
// topological order, op arities from the op table, parameter and constant
// data that matches its type, defined graph outputs. With `requireTypes`,
// every value must also have a dtype and a rank (after infer-shapes).
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

namespace sgc::ir {

Error verify(const Graph& g, bool requireTypes = false);

/// Structural equality: same names, types, data, nodes in the same order
/// with the same inputs and attributes. Used by round-trip tests.
bool equal(const Graph& a, const Graph& b, std::string* why = nullptr);

} // namespace sgc::ir
