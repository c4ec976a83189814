// Column sums on a GPU a block per tile: y_k[c] = sum over rows r of term_k(r, c), for a few
// results y_k of C columns each (a bias gradient: one; LayerNormGrad's dscale and dbias: two).
//
// A block of 8 warps takes a tile of 32 v columns (v: the columns of a 16-byte load) and a chunk
// of rows: each lane sums v neighbouring columns over every 8th row of the chunk, loading 16
// bytes a row (a warp reads 512 contiguous bytes of bf16), several rows at once. The 8 warps'
// sums then meet in shared memory, and each column's total goes into y by one atomic add per
// block, a warp adding 32 neighbouring columns at a time. The results must be zeroed before.
#pragma once
#include "codegen/kir/Builder.h"

#include <functional>
#include <optional>

namespace sgc::kir {

/// What a lane sums for a row: `setup` statements (loads of the row's statistics, say) and, per
/// result k and column u < v of the lane's, the term (an f32 expression).
struct ColumnTerms {
  std::vector<StmtRef> setup;
  std::vector<std::vector<ExprRef>> terms; ///< [k][u]
  /// Statements given the first result's terms as computed (locals), run after every row's loads:
  /// a prologue's values stored as they are summed.
  std::function<std::vector<StmtRef>(const std::vector<ExprRef>& values)> after;
};

/// The terms of row `row` (an i64 expression) at columns col0 + u, u < v (col0 a multiple of v).
using ColumnTermsOf = std::function<ColumnTerms(const ExprRef& row, const ExprRef& col0)>;

/// The columns a lane sums in blockColumnSums: 16 bytes of the narrowest operand's elements.
int columnLaneWidth(size_t elementBytes);

/// The kernel of column sums of `rows` rows of C columns into `results` (f32 [C] each, zeroed by
/// the caller), built in `b`; none where C is not a multiple of 32 v or rows not of 8.
std::optional<Kernel> blockColumnSums(Builder& b, int64_t rows, int64_t C, int v, const std::vector<const ir::Value*>& results,
                                      const ColumnTermsOf& termsOf);

} // namespace sgc::kir
