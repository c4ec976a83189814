#include "codegen/kir/ColumnSumsGpu.h"

#include <algorithm>

namespace sgc::kir {
namespace {

using B = Builder;

constexpr int kThreads = 256;           ///< a block: 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMostChunkRows = 128; ///< rows a block sums (16 a warp): each column gets rows / 128 atomic adds
/// Rows a lane sums in one pass. ptxas orders their loads as it likes; 4 held the MLP's GELU
/// gradient with its bias sums at 82 registers (2 blocks an SM), 2 at 64 (4 blocks): 20% faster
/// on an H100 (bench/RESULTS.md, session 35).
constexpr int64_t kRowsAtOnce = 2;

} // namespace

int columnLaneWidth(size_t elementBytes) { return (int)std::clamp<size_t>(16 / std::max<size_t>(elementBytes, 1), 1, 8); }

std::optional<Kernel> blockColumnSums(Builder& b, int64_t rows, int64_t C, int v, const std::vector<const ir::Value*>& results,
                                      const ColumnTermsOf& termsOf) {
  int64_t tileColumns = 32 * (int64_t)v, chunkRows = kMostChunkRows;
  while (chunkRows > kWarps && rows % chunkRows) chunkRows /= 2;
  if (results.empty() || C % tileColumns || rows % chunkRows || rows < chunkRows) return std::nullopt;
  int64_t tiles = C / tileColumns, atOnce = std::min(kRowsAtOnce, chunkRows / kWarps), K = (int64_t)results.size();
  Scalar t = Scalar::F32;
  int e = b.newLoopVar(), s = b.newLoopVar();
  ExprRef tid = binary(KOp::IMod, loopVar(e), B::i(kThreads)), block = binary(KOp::IDiv, loopVar(e), B::i(kThreads));
  ExprRef warp = binary(KOp::IDiv, tid, B::i(32)), lane = binary(KOp::IMod, tid, B::i(32));
  ExprRef tile = binary(KOp::IMod, block, B::i(tiles)), chunk = binary(KOp::IDiv, block, B::i(tiles));
  ExprRef col0 = B::add(B::mul(tile, B::i(tileColumns)), B::mul(lane, B::i(v)));

  std::vector<StmtRef> body;
  std::vector<std::vector<int>> acc;
  for (int64_t k = 0; k < K; ++k) acc.push_back(locals(b, v, body, [&](int64_t) { return B::c(0, t); }));
  std::vector<StmtRef> loads, sums;
  for (int64_t i = 0; i < atOnce; ++i) { // row chunk * chunkRows + (s * atOnce + i) * 8 + warp
    ExprRef row = B::add(B::add(B::mul(chunk, B::i(chunkRows)), B::mul(B::add(B::mul(loopVar(s), B::i(atOnce)), B::i(i)), B::i(kWarps))), warp);
    ColumnTerms ct = termsOf(row, col0);
    loads.insert(loads.end(), ct.setup.begin(), ct.setup.end());
    std::vector<ExprRef> firsts;
    for (int64_t k = 0; k < K; ++k)
      for (int u = 0; u < v; ++u) {
        int term = b.newLocal();
        loads.push_back(let(term, ct.terms.at(k).at(u)));
        sums.push_back(set(acc[k][u], B::add(local(acc[k][u], t), local(term, t))));
        if (k == 0) firsts.push_back(local(term, t));
      }
    if (ct.after)
      for (StmtRef& st : ct.after(firsts)) sums.push_back(std::move(st));
  }
  loads.insert(loads.end(), sums.begin(), sums.end()); // every row's loads before any sum
  body.push_back(loop(s, chunkRows / (kWarps * atOnce), false, std::move(loads)));

  int partial = (int)b.k.shared.size(); // [k][warp][tile column]
  b.k.shared.push_back({ir::DType::F32, K * kWarps * tileColumns});
  auto at = [&](int64_t k, const ExprRef& w, const ExprRef& c) { return B::add(B::mul(B::add(B::i(k * kWarps), w), B::i(tileColumns)), c); };
  for (int64_t k = 0; k < K; ++k)
    for (int u = 0; u < v; ++u) body.push_back(sharedStore(partial, at(k, warp, B::add(B::mul(lane, B::i(v)), B::i(u))), local(acc[k][u], t)));
  body.push_back(barrier());
  for (int64_t k = 0; k < K; ++k)
    for (int64_t first = 0; first < tileColumns; first += kThreads) { // a thread a column: a warp's atomic adds on neighbours
      ExprRef c = B::add(B::i(first), tid);
      std::vector<ExprRef> parts;
      for (int64_t w = 0; w < kWarps; ++w) parts.push_back(sharedLoad(partial, at(k, B::i(w), c), t));
      StmtRef add = b.atomic(results[k], B::add(B::mul(tile, B::i(tileColumns)), c), sumTree(parts));
      body.push_back(tileColumns - first >= kThreads ? add : when(b, binary(KOp::Lt, c, B::i(tileColumns)), {add}));
    }
  Kernel kernel = b.finish(loop(e, tiles * (rows / chunkRows) * kThreads, true, std::move(body)));
  kernel.gpuOnly = true;
  kernel.threads = kThreads;
  return kernel;
}

} // namespace sgc::kir
