// The IR's text form. print() and parse() are inverses: parsing a printed
// graph gives an equal graph (tests/ir/RoundTripTest.cpp).
//
//   graph @main {
//     input %x : f32[N, 4]
//     param %w : f32[4, 2] = dense<"0x0000803f...">
//     const %axes : i64[1] = dense<"0x0100000000000000">
//     %h : f32[N, 2] = MatMul(%x, %w) loc("mm")
//     %y : f32[N, 2], %m : bool[N, 2] = Dropout(%h, _, _) {seed = 0} loc("drop")
//     output %y
//   }
//
// `_` is an absent optional input or an unused result. Names that are not
// plain identifiers are quoted (%"onnx::MatMul_3"). Tensor data is hex of
// the little-endian bytes; `dense<elided>` stands for data left out.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace sgc::ir {

struct PrintOptions {
  /// Tensors with more bytes than this print as dense<elided>.
  size_t elideDataAbove = SIZE_MAX;
};

std::string print(const Graph& g, const PrintOptions& opts = {});

struct ParseOptions {
  /// Accept dense<elided> and fill such tensors with zeros.
  bool allowElided = false;
};

/// Parses the text form; `fileName` is used in error messages.
Expected<std::unique_ptr<Graph>> parse(std::string_view text, const std::string& fileName,
                                       const ParseOptions& opts = {});

} // namespace sgc::ir
