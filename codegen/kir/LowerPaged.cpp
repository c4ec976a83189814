// Lowering of the paged key/value cache (KvCacheWrite, PagedAttention; see
// ir/Ops.def). The cache write is one parallel iteration per element of a
// token's key or value, stored (or not, for an unused token) at its page and
// row. The attention is one parallel iteration per (token, head): it keeps
// the query in locals and walks the sequence's positions 0..pos through the
// block table with the online softmax of flash attention. Indices read from
// the tables are clamped into their buffers, and a token whose sequence,
// position or page is out of range writes nothing and reads as zero.
//
// On a GPU, a bf16 cache with heads of 64, 128, ... elements and pages of a
// multiple of 8 tokens runs a warp per (token, head): lanes 8r..8r+7 read
// key rows j = r (mod 4) of the sequence, each lane a chunk of D/8 elements
// (16 bytes or more, whole loads), two rows per step so that a warp has 2 KB
// of keys and 2 KB of values in flight; the dot products are sums over the
// 8 lanes of a row, each group of 8 keeps its own online softmax, and the
// four are merged at the end (sums over the lanes 8 apart).
#include "codegen/kir/Builder.h"
#include "codegen/kir/LowerOps.h"

#include <cmath>

namespace sgc::kir {
namespace {
using B = Builder;

/// The cache geometry of a paged node, and the page lookup of a token's positions.
struct Paged {
  const ir::Node& n;
  const ir::Value *pool, *tables, *seq, *pos;
  int64_t blocks, page, heads, dim, seqs, maxBlocks, tokens;

  Paged(const ir::Node& node, size_t poolAt, size_t tablesAt)
      : n(node), pool(node.input(poolAt)), tables(node.input(tablesAt)), seq(node.input(tablesAt + 1)), pos(node.input(tablesAt + 2)) {
    auto p = pool->type.shape(), t = tables->type.shape();
    blocks = p[0], page = p[2], heads = p[3], dim = p[4], seqs = t[0], maxBlocks = t[1];
    tokens = seq->type.shape()[0];
  }
  /// Token `tok`'s sequence slot and position, clamped into range, and whether they are valid.
  ExprRef slot(B& b, const ExprRef& tok) const { return cast(b.ld(seq, tok), Scalar::I64); }
  ExprRef position(B& b, const ExprRef& tok) const { return cast(b.ld(pos, tok), Scalar::I64); }
  ExprRef validToken(const ExprRef& s, const ExprRef& p) const {
    return binary(KOp::And, binary(KOp::And, binary(KOp::Ge, s, B::i(0)), binary(KOp::Lt, s, B::i(seqs))),
                  binary(KOp::And, binary(KOp::Ge, p, B::i(0)), binary(KOp::Lt, p, B::i(maxBlocks * page))));
  }
  /// The page holding position `p` of sequence slot `s` (unclamped: check with validPage).
  ExprRef pageOf(B& b, const ExprRef& s, const ExprRef& p) const {
    return cast(b.ld(tables, B::add(B::mul(B::clamp(s, seqs), B::i(maxBlocks)), B::clamp(binary(KOp::IDiv, p, B::i(page)), maxBlocks))), Scalar::I64);
  }
  ExprRef validPage(const ExprRef& blk) const { return binary(KOp::And, binary(KOp::Ge, blk, B::i(0)), binary(KOp::Lt, blk, B::i(blocks))); }
  /// The flat offset of element (kv, head, e) of the row of position p in page blk.
  ExprRef at(const ExprRef& blk, int64_t kv, const ExprRef& p, const ExprRef& head, const ExprRef& e) const {
    ExprRef row = B::add(B::mul(B::add(B::mul(B::clamp(blk, blocks), B::i(2)), B::i(kv)), B::i(page)), binary(KOp::IMod, p, B::i(page)));
    return B::add(B::mul(B::add(B::mul(row, B::i(heads)), head), B::i(dim)), e);
  }
};

Kernel cacheWrite(const std::string& name, const ir::Node& n) {
  Paged g(n, 0, 3);
  const ir::Value *k = n.input(1), *v = n.input(2), *out = n.outputs[0];
  B b(name);
  int i = b.newLoopVar(), once = b.newLoopVar(), s = b.newLocal(), p = b.newLocal(), blk = b.newLocal();
  int64_t width = g.heads * g.dim; // a token's key (or value) elements
  ExprRef tok = binary(KOp::IDiv, loopVar(i), B::i(2 * width)), kv = binary(KOp::IMod, binary(KOp::IDiv, loopVar(i), B::i(width)), B::i(2)),
          e = binary(KOp::IMod, loopVar(i), B::i(width));
  ExprRef S = local(s, Scalar::I64), P = local(p, Scalar::I64), Blk = local(blk, Scalar::I64);
  ExprRef valid = binary(KOp::And, g.validToken(S, P), g.validPage(Blk));
  ExprRef src = B::add(B::mul(tok, B::i(width)), e);
  ExprRef value = select(binary(KOp::Eq, kv, B::i(0)), b.ld(k, src), b.ld(v, src));
  ExprRef row = B::add(B::mul(B::add(B::mul(B::clamp(Blk, g.blocks), B::i(2)), kv), B::i(g.page)), binary(KOp::IMod, P, B::i(g.page)));
  std::vector<StmtRef> body{let(s, g.slot(b, tok)), let(p, g.position(b, tok)), let(blk, g.pageOf(b, S, P)),
                            loopUpTo(once, 1, select(valid, B::i(1), B::i(0)), {b.st(out, B::add(B::mul(row, B::i(width)), e), value)})};
  return b.finish(loop(i, g.tokens * 2 * width, true, std::move(body)));
}

Kernel attention(const std::string& name, const ir::Node& n) {
  Paged g(n, 1, 2);
  const ir::Value *q = n.input(0), *y = n.outputs[0];
  Scalar t = computeType(q->type.dtype);
  auto c = [&](double x) { return B::c(x, t); };
  B b(name);
  int r = b.newLoopVar(), j = b.newLoopVar();
  int s = b.newLocal(), p = b.newLocal(), len = b.newLocal(), blk = b.newLocal();
  int m = b.newLocal(), l = b.newLocal(), sc = b.newLocal(), mn = b.newLocal(), corr = b.newLocal(), w = b.newLocal();
  ExprRef tok = binary(KOp::IDiv, loopVar(r), B::i(g.heads)), head = binary(KOp::IMod, loopVar(r), B::i(g.heads));
  ExprRef S = local(s, Scalar::I64), P = local(p, Scalar::I64), Blk = local(blk, Scalar::I64);
  std::vector<StmtRef> body{let(s, g.slot(b, tok)), let(p, g.position(b, tok)),
                            let(len, select(g.validToken(S, P), B::add(P, B::i(1)), B::i(0))), let(m, c(-INFINITY)), let(l, c(0))};
  auto qs = locals(b, g.dim, body, [&](int64_t e) { return B::mul(b.ld(q, B::add(B::mul(loopVar(r), B::i(g.dim)), B::i(e))), c(n.getFloat("scale", 1.0))); });
  auto os = locals(b, g.dim, body, [&](int64_t) { return c(0); });
  ExprRef key = loopVar(j);
  std::vector<ExprRef> terms;
  for (int64_t e = 0; e < g.dim; ++e) terms.push_back(B::mul(local(qs[e], t), b.ld(g.pool, g.at(Blk, 0, key, head, B::i(e)))));
  // A page outside the pool reads as a score of -inf: it adds nothing.
  std::vector<StmtRef> step{let(blk, g.pageOf(b, S, key)),
                            let(sc, select(g.validPage(Blk), sumTree(std::move(terms)), c(-INFINITY))),
                            let(mn, binary(KOp::Max, local(m, t), local(sc, t))),
                            let(corr, select(binary(KOp::Eq, local(mn, t), c(-INFINITY)), c(1), unary(KOp::Exp, B::sub(local(m, t), local(mn, t))))),
                            let(w, select(binary(KOp::Eq, local(sc, t), c(-INFINITY)), c(0), unary(KOp::Exp, B::sub(local(sc, t), local(mn, t))))),
                            set(l, B::add(B::mul(local(l, t), local(corr, t)), local(w, t)))};
  for (int64_t e = 0; e < g.dim; ++e)
    step.push_back(set(os[e], B::add(B::mul(local(os[e], t), local(corr, t)), B::mul(local(w, t), b.ld(g.pool, g.at(Blk, 1, key, head, B::i(e)))))));
  step.push_back(set(m, local(mn, t)));
  body.push_back(loopUpTo(j, g.maxBlocks * g.page, local(len, Scalar::I64), std::move(step)));
  for (int64_t e = 0; e < g.dim; ++e)
    body.push_back(b.st(y, B::add(B::mul(loopVar(r), B::i(g.dim)), B::i(e)),
                        select(binary(KOp::Gt, local(l, t), c(0)), B::div(local(os[e], t), local(l, t)), c(0))));
  return b.finish(loop(r, g.tokens * g.heads, true, std::move(body)));
}

/// The warp-per-(token, head) form (see the top of the file).
Kernel warpAttention(const std::string& name, const ir::Node& n) {
  Paged g(n, 1, 2);
  const ir::Value *q = n.input(0), *y = n.outputs[0];
  const int64_t width = g.dim / 8, rowsPerStep = 8; // a lane's chunk; keys a warp reads per step
  auto f = [](double x) { return B::c(x, Scalar::F32); };
  auto lf = [](int id) { return local(id, Scalar::F32); };
  B b(name);
  int iv = b.newLoopVar(), step = b.newLoopVar();
  int s = b.newLocal(), p = b.newLocal(), len = b.newLocal(), blk = b.newLocal(), m = b.newLocal(), l = b.newLocal();
  ExprRef warp = binary(KOp::IDiv, loopVar(iv), B::i(32)), lane = binary(KOp::IMod, loopVar(iv), B::i(32));
  ExprRef tok = binary(KOp::IDiv, warp, B::i(g.heads)), head = binary(KOp::IMod, warp, B::i(g.heads));
  ExprRef group = binary(KOp::IDiv, lane, B::i(8)), chunk = B::mul(binary(KOp::IMod, lane, B::i(8)), B::i(width));
  ExprRef S = local(s, Scalar::I64), P = local(p, Scalar::I64), Len = local(len, Scalar::I64), Blk = local(blk, Scalar::I64);
  std::vector<StmtRef> body{let(s, g.slot(b, tok)), let(p, g.position(b, tok)),
                            let(len, select(g.validToken(S, P), B::add(P, B::i(1)), B::i(0))), let(m, f(-INFINITY)), let(l, f(0))};
  ExprRef qRow = B::add(B::mul(warp, B::i(g.dim)), chunk);
  auto qs = locals(b, width, body, [&](int64_t e) { return B::mul(b.ld(q, B::add(qRow, B::i(e))), f(n.getFloat("scale", 1.0))); });
  auto os = locals(b, width, body, [&](int64_t) { return f(0); });
  // One step: keys j0 + group and j0 + 4 + group, all in the page of j0 (pages hold a multiple of 8).
  ExprRef j0 = B::mul(loopVar(step), B::i(rowsPerStep));
  std::vector<StmtRef> st{let(blk, g.pageOf(b, S, j0))};
  struct Key {
    ExprRef j, valid;
    std::vector<int> k, v;
    int score, w;
  };
  std::vector<Key> keys(2);
  for (int u = 0; u < 2; ++u) {
    Key& key = keys[u];
    key.j = B::add(j0, B::add(group, B::i(4 * u)));
    key.valid = binary(KOp::Lt, key.j, Len);
    // Every load first: 4 rows of keys and values in flight.
    key.k = locals(b, width, st, [&](int64_t e) { return b.ld(g.pool, g.at(Blk, 0, key.j, head, B::add(chunk, B::i(e)))); });
    key.v = locals(b, width, st, [&](int64_t e) { return b.ld(g.pool, g.at(Blk, 1, key.j, head, B::add(chunk, B::i(e)))); });
  }
  for (Key& key : keys) {
    std::vector<ExprRef> terms;
    for (int64_t e = 0; e < width; ++e) terms.push_back(B::mul(lf(qs[e]), lf(key.k[e])));
    key.score = b.newLocal();
    st.push_back(let(key.score, select(key.valid, warpReduce(KOp::Add, sumTree(std::move(terms)), 8), f(-INFINITY))));
  }
  int mn = b.newLocal(), corr = b.newLocal();
  st.push_back(let(mn, binary(KOp::Max, lf(m), binary(KOp::Max, lf(keys[0].score), lf(keys[1].score)))));
  ExprRef none = binary(KOp::Eq, lf(mn), f(-INFINITY)); // no visible key yet (a short context's later groups)
  st.push_back(let(corr, select(none, f(1), unary(KOp::Exp, B::sub(lf(m), lf(mn))))));
  for (Key& key : keys) {
    key.w = b.newLocal();
    st.push_back(let(key.w, select(key.valid, unary(KOp::Exp, B::sub(lf(key.score), lf(mn))), f(0))));
  }
  st.push_back(set(l, B::add(B::mul(lf(l), lf(corr)), B::add(lf(keys[0].w), lf(keys[1].w)))));
  for (int64_t e = 0; e < width; ++e) {
    ExprRef add = f(0);
    for (Key& key : keys) add = B::add(add, select(key.valid, B::mul(lf(key.w), lf(key.v[e])), f(0))); // rows past the end: stale bytes
    st.push_back(set(os[e], B::add(B::mul(lf(os[e]), lf(corr)), add)));
  }
  st.push_back(set(m, lf(mn)));
  body.push_back(loopUpTo(step, g.maxBlocks * g.page / rowsPerStep, binary(KOp::IDiv, B::add(Len, B::i(rowsPerStep - 1)), B::i(rowsPerStep)), std::move(st)));
  // The four groups' softmaxes merged: the lanes 8 apart hold the same chunk.
  int top = b.newLocal(), scale = b.newLocal(), sum = b.newLocal();
  body.push_back(let(top, warpReduce(KOp::Max, lf(m), 4, 8)));
  body.push_back(let(scale, select(binary(KOp::Eq, lf(m), f(-INFINITY)), f(0), unary(KOp::Exp, B::sub(lf(m), lf(top))))));
  body.push_back(let(sum, warpReduce(KOp::Add, B::mul(lf(l), lf(scale)), 4, 8)));
  for (int64_t e = 0; e < width; ++e) {
    ExprRef o = warpReduce(KOp::Add, B::mul(lf(os[e]), lf(scale)), 4, 8);
    body.push_back(b.st(y, B::add(qRow, B::i(e)), select(binary(KOp::Gt, lf(sum), f(0)), B::div(o, lf(sum)), f(0))));
  }
  Kernel k = b.finish(loop(iv, g.tokens * g.heads * 32, true, std::move(body)));
  k.gpuOnly = true;
  k.threads = 128;
  return k;
}

} // namespace

Expected<std::optional<std::vector<Kernel>>> pagedAttentionGpu(const std::string& name, const ir::Node& n) {
  Paged g(n, 1, 2);
  if (n.input(0)->type.dtype != ir::DType::BF16 || g.dim % 64 != 0 || g.page % 8 != 0) return std::optional<std::vector<Kernel>>();
  return std::optional<std::vector<Kernel>>(std::vector<Kernel>{warpAttention(name, n)});
}

Expected<std::vector<Kernel>> lowerPaged(const std::string& name, const ir::Node& n) {
  if (n.op == ir::Op::KvCacheWrite) return std::vector<Kernel>{cacheWrite(name, n)};
  return std::vector<Kernel>{attention(name, n)};
}

} // namespace sgc::kir
