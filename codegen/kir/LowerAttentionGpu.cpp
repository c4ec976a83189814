// The GPU form of FusedAttention and its gradient in bf16: flash attention on
// the tensor cores (mma.m16n8k16, see kir::mmaBf16). A warp owns 32 query rows
// (forward), 16 (dq) or 16 key rows (dk/dv) and walks the other side in blocks:
//
//   forward  S = Q K^T, online softmax, O += P V           (keeps O, max, sum)
//   dq       delta = dO . O; S = Q K^T, P from the log-sum-exp, dP = dO V^T,
//            dS = P (dP - delta), dQ += dS K
//   dk, dv   S^T = K Q^T, P^T from the log-sum-exp, dV += P^T dO,
//            dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q
//
// The warps of a GPU block (WarpBlock: up to 4, on neighbouring rows of one
// problem) walk the other side together: each block of its rows is copied into
// shared memory by asynchronous copies one block ahead of the products that
// read it (SharedTile, Writer::stagedWalk), so the copies run behind the
// arithmetic and each row is read from global memory once per GPU block. A
// warp's own rows (Q, or K and V) stay in registers, as bf16 (letBf16: at D 128
// the dK/dV kernel's K and V as f32 spilled). Operand fragments are read
// 16 bytes a lane (Lane::dim and Lane::spread permute the dims so that a lane's
// elements are neighbours; SharedTile swizzles them clear of bank conflicts); a
// product's f32 result fragment is, pair for pair, the next product's bf16
// operand fragment, so P and dS never leave registers. Only the blocks the
// causal diagonal crosses are masked, and a warp skips those wholly past its
// diagonal. Nothing of size [T, T] is stored. The CPU keeps the scalar kernels
// of LowerAttention.cpp, which are the reference.
#include "codegen/kir/AttentionGeometry.h"
#include "codegen/kir/Builder.h"
#include "codegen/kir/LowerOps.h"

#include <array>
#include <cmath>
#include <functional>

namespace sgc::kir {
namespace {
using B = Builder;
using Frag = std::array<int, 4>; ///< an m16n8 f32 result fragment: four locals
using RowOf = std::function<ExprRef(const ExprRef&)>;

/// A column of an operand: its index, and for the swizzled layout of a SharedTile its 16-byte
/// chunk and the element within (set where the width is a multiple of 64).
struct Col {
  ExprRef index, chunk;
  int64_t within = 0;
};

/// Where a product's operand comes from: element (row, col), `row` counted within the 16 (or 8)
/// rows the product reads.
using Source = std::function<ExprRef(const ExprRef& row, const Col& col)>;

/// One lane's coordinates within its warp's 16-row tile: g = lane / 4 picks rows g and g + 8;
/// t = lane % 4 picks columns 2t, 2t + 1 (and 2t + 8, 2t + 9 of an operand).
struct Lane {
  ExprRef warp, g, t;
  explicit Lane(const ExprRef& iv) {
    ExprRef lane = binary(KOp::IMod, iv, B::i(32));
    warp = binary(KOp::IDiv, iv, B::i(32));
    g = binary(KOp::IDiv, lane, B::i(4));
    t = binary(KOp::IMod, lane, B::i(4));
  }
  /// Row of result element i (0..3) of a fragment: g or g + 8.
  ExprRef row(int i) const { return i < 2 ? g : B::add(g, B::i(8)); }
  /// Column of result element i within its 8 columns: 2t or 2t + 1.
  ExprRef col(int i) const { return B::add(B::mul(t, B::i(2)), B::i(i & 1)); }
  /// Column (of A) or row (of B) of operand element i within its 16: 2t, 2t+1, 2t+8, 2t+9.
  ExprRef k(int i) const { return B::add(B::mul(t, B::i(2)), B::i((i & 1) + (i >= 2 ? 8 : 0))); }

  /// Where a contracted dim's index goes in memory. A product's sum over its k indices may
  /// take them in any order, as long as both operands agree: k-step s's indices 2t, 2t+1, 2t+8,
  /// 2t+9 (`pair` the +1, `high` the +8) map to 4 neighbouring elements, and those of k-steps
  /// s and s+1 to 8, so that a lane reads its operands of two k-steps from one 16-byte load.
  /// `width` is the dim's size (a multiple of 16; 4 elements per lane when not of 32).
  ExprRef dim(int64_t s, int pair, int high, int64_t width) const {
    int64_t per = width % 32 == 0 ? 8 : 4, steps = per / 4; // elements per lane per chunk; k-steps per chunk
    return B::add(B::i((s / steps) * 4 * per + 4 * (s % steps) + pair + 2 * high), B::mul(t, B::i(per)));
  }

  /// dim(...) as a Col.
  Col dimCol(int64_t s, int pair, int high, int64_t width) const {
    Col c{dim(s, pair, high, width), nullptr};
    if (width % 64 == 0) c.chunk = B::add(B::i((s / 2) * 4), t), c.within = 4 * (s % 2) + pair + 2 * high;
    return c;
  }

  /// spread(n, g, width) as a Col.
  static Col spreadCol(int64_t n, const ExprRef& g, int64_t width) {
    Col c{spread(n, g, width), nullptr};
    if (width % 64 == 0) c.chunk = B::add(B::mul(g, B::i(width / 64)), B::i(n / 8)), c.within = n % 8;
    return c;
  }

  /// The index of column g of n-tile n of a product's result, in a dim of `width` (the other
  /// operand's columns, also in any order): lane g's columns of all n-tiles are neighbours, so
  /// that it reads its B operands of all of them in one load.
  static ExprRef spread(int64_t n, const ExprRef& g, int64_t width) { return B::add(B::mul(g, B::i(width / 8)), B::i(n)); }
};

struct Geometry : AttentionGeometry {
  using AttentionGeometry::AttentionGeometry;

  /// The flat rows (of a tensor of `len` positions seen as [rows, width]) of problem p's
  /// positions pos0, pos0 + 1, ...: of the result (and its gradient, the row statistics), or
  /// with `which` >= 0 of operand `which` (0 q, 1 k, 2 v; they differ where packed).
  RowOf rows(const ExprRef& p, const ExprRef& pos0, int64_t len, int which = -1) const {
    bool inPacked = packed && which >= 0;
    return [this, p, pos0, len, which, inPacked](const ExprRef& r) {
      ExprRef pos = B::add(pos0, r);
      if (!bthd) return B::add(B::mul(p, B::i(len)), pos);
      ExprRef position = B::add(B::mul(binary(KOp::IDiv, p, B::i(h)), B::i(len)), pos), head = binary(KOp::IMod, p, B::i(h));
      if (!inPacked) return B::add(B::mul(position, B::i(h)), head);
      return B::add(B::mul(position, B::i(3 * h)), B::add(B::i(which * h), head));
    };
  }

  /// Whether the tensor-core kernels apply: bf16 operands, every size a multiple of 16.
  bool fits() const {
    for (size_t i = 0; i < 3; ++i)
      if (n.input(i)->type.dtype != ir::DType::BF16) return false;
    return heads > 0 && tq % 16 == 0 && tk % 16 == 0 && d % 16 == 0 && dv % 16 == 0 && (!causal || tq == tk);
  }
};

ExprRef f(double v) { return B::c(v, Scalar::F32); }

ExprRef lf(int id) { return local(id, Scalar::F32); }

/// The largest of 64, 32, 16 that divides n.
int64_t blockFor(int64_t n, int64_t most) {
  int64_t b = most;
  while (n % b) b /= 2;
  return b;
}

ExprRef bitAnd(const ExprRef& x, int64_t m) { return binary(KOp::And, x, B::i(m)); }
ExprRef shl(const ExprRef& x, int64_t n) { return binary(KOp::Shl, x, B::i(n)); }

/// `rows` x `width` bf16 elements of an operand in a block's shared memory, two stages of them
/// (a pipeline's tile in use and the next one arriving), filled by asynchronous 16-byte copies.
/// Where the width is a multiple of 64 the 16-byte chunks of each row are swizzled (chunk ^
/// swizzle(row)) so that each quarter warp's fragment loads hit 32 different banks: a contracted
/// load reads rows g, g + 1 at chunks 4c + t (t < 4), a spread one rows 2t (or 2t + 1, + 8) at
/// chunk g width / 64 (+ 1), and a quarter warp is g < 2.
struct SharedTile {
  int array;
  int64_t rows, width;

  SharedTile(B& b, int64_t rows, int64_t width) : array((int)b.k.shared.size()), rows(rows), width(width) {
    b.k.shared.push_back({ir::DType::BF16, 2 * rows * width});
  }

  bool swizzled() const { return width % 64 == 0; }

  /// Rows 2p and 2p + 1 differ in bit 2; rows 2t (t < 4) in two bits that the spread loads'
  /// chunks (bit 0 where width / 64 > 1) do not use.
  ExprRef swizzle(const ExprRef& row) const {
    ExprRef u = bitAnd(binary(KOp::Shr, row, B::i(1)), 3);
    ExprRef spread = width == 64 ? shl(u, 1) : binary(KOp::Or, bitAnd(u, 1), shl(bitAnd(u, 2), 1));
    return binary(KOp::Xor, spread, shl(bitAnd(row, 1), 2));
  }

  ExprRef at(const ExprRef& stage, const ExprRef& row, const Col& c) const {
    ExprRef base = B::add(B::mul(stage, B::i(rows * width)), B::mul(row, B::i(width)));
    if (!swizzled()) return B::add(base, c.index);
    return B::add(base, B::add(B::mul(binary(KOp::Xor, c.chunk, swizzle(row)), B::i(8)), B::i(c.within)));
  }

  /// The tile's rows from `row0` on, as a product's operand.
  Source source(const ExprRef& stage, const ExprRef& row0) const {
    return [this, stage, row0](const ExprRef& r, const Col& c) { return sharedLoad(array, at(stage, B::add(row0, r), c), Scalar::F32); };
  }

  /// The copies of `m`'s rows rowOf(0..rows-1) into stage `stage`, spread over the block's
  /// `threads` threads (`tid` the thread's index in its block).
  std::vector<StmtRef> copies(B& b, const ExprRef& stage, const ir::Value* m, const RowOf& rowOf, const ExprRef& tid, int64_t threads) const {
    std::vector<StmtRef> out;
    int64_t perRow = width / 8, total = rows * perRow;
    for (int64_t c0 = 0; c0 < total; c0 += threads) {
      ExprRef chunk = B::add(B::i(c0), tid);
      ExprRef row = binary(KOp::IDiv, chunk, B::i(perRow)), cc = binary(KOp::IMod, chunk, B::i(perRow));
      Col col{B::mul(cc, B::i(8)), cc, 0};
      StmtRef copy = copyAsync(array, at(stage, row, col), b.buf(m), B::add(B::mul(rowOf(row), B::i(width)), B::mul(cc, B::i(8))));
      out.push_back(c0 + threads <= total ? copy : when(b, binary(KOp::Lt, chunk, B::i(total)), {copy}));
    }
    return out;
  }
};

/// One f32 per row of `rows` rows of a problem (the log-sum-exp, delta) in a block's shared
/// memory, two stages as SharedTile's, copied 4 bytes a thread (a problem's rows may lie apart).
struct SharedRowValues {
  int array;
  int64_t rows;

  SharedRowValues(B& b, int64_t rows) : array((int)b.k.shared.size()), rows(rows) { b.k.shared.push_back({ir::DType::F32, 2 * rows}); }

  ExprRef at(const ExprRef& stage, const ExprRef& row) const { return sharedLoad(array, B::add(B::mul(stage, B::i(rows)), row), Scalar::F32); }

  std::vector<StmtRef> copies(B& b, const ExprRef& stage, const ir::Value* m, const RowOf& rowOf, const ExprRef& tid, int64_t threads) const {
    std::vector<StmtRef> out;
    for (int64_t r0 = 0; r0 < rows; r0 += threads) {
      ExprRef r = B::add(B::i(r0), tid);
      StmtRef copy = copyAsync(array, B::add(B::mul(stage, B::i(rows)), r), b.buf(m), rowOf(r), 4);
      out.push_back(when(b, binary(KOp::Lt, r, B::i(rows)), {copy}));
    }
    return out;
  }
};

class Writer {
public:
  Writer(const std::string& name, const Geometry& geo) : b(name), a(geo) {}

  B b;
  const Geometry& a;
  std::vector<StmtRef> body;

  /// `count` result fragments, zeroed.
  std::vector<Frag> zeros(int64_t count, std::vector<StmtRef>& out) {
    std::vector<Frag> fs(count);
    for (Frag& fr : fs)
      for (int& id : fr) {
        id = b.newLocal();
        out.push_back(let(id, f(0)));
      }
    return fs;
  }

  /// The A operand fragments of 16 rows (`row` maps 0..15 to flat rows) of `m` (row-major,
  /// `width` wide, contracted: Lane::dim), one per 16 columns, held in locals (bf16 ones for a bf16 `m`).
  std::vector<std::array<int, 8>> operandRows(const Lane& ln, const ir::Value* m, const RowOf& row, int64_t width) {
    std::vector<std::array<int, 8>> fs(width / 16);
    for (int64_t s = 0; s < width / 16; ++s)
      for (int i = 0; i < 8; ++i) {
        ExprRef r = row(i % 4 < 2 ? ln.g : B::add(ln.g, B::i(8)));
        fs[s][i] = b.newLocal();
        ExprRef v = b.ld(m, B::add(B::mul(r, B::i(width)), ln.dim(s, i & 1, i >= 4, width)));
        body.push_back(m->type.dtype == ir::DType::BF16 ? letBf16(fs[s][i], v) : let(fs[s][i], v)); // bf16 exactly: half a register
      }
    return fs;
  }

  static std::vector<ExprRef> held(const std::array<int, 8>& a) {
    std::vector<ExprRef> v;
    for (int id : a) v.push_back(lf(id));
    return v;
  }

  /// The A operand for 16 columns made of two neighbouring result fragments (flash attention's
  /// register reuse: P and dS go from one product to the next without leaving the warp).
  static std::vector<ExprRef> fromResults(const Frag& left, const Frag& right) {
    return {lf(left[0]), lf(left[1]), lf(left[2]), lf(left[3]), lf(right[0]), lf(right[1]), lf(right[2]), lf(right[3])};
  }

  /// B[k][n] = M[n][k] for k-step s, n < 8: the transpose of 8 rows of `m`, k contracted
  /// (Lane::dim): K^T in S = Q K^T.
  static std::vector<ExprRef> contracted(const Lane& ln, const Source& m, int64_t s, int64_t width) {
    std::vector<ExprRef> v;
    for (int i = 0; i < 4; ++i) v.push_back(m(ln.g, ln.dimCol(s, i & 1, i >= 2, width)));
    return v;
  }

  /// acc[n] += A M_n^T for every n-tile n of `acc`: A the held fragments (one per 16 of the
  /// contracted `width`), M_n the 8 rows tile(n) (S = Q K^T, dP = dO V^T, ...).
  static void timesRowsOf(std::vector<StmtRef>& step, const Lane& ln, const std::vector<Frag>& acc, const std::vector<std::array<int, 8>>& a,
                          int64_t width, const std::function<Source(int64_t)>& tile) {
    for (size_t n = 0; n < acc.size(); ++n) {
      Source rows = tile((int64_t)n);
      for (int64_t e = 0; e < width / 16; ++e) step.push_back(mmaBf16({acc[n].begin(), acc[n].end()}, held(a[e]), contracted(ln, rows, e, width)));
    }
  }

  /// acc[n] += R M for every n-tile n of `acc`: R the result fragments `r` (P or dS; two of them
  /// per k-step of 16), M the 16 rows rows(e) for k-step e, its columns spread.
  static void resultsTimesRows(std::vector<StmtRef>& step, const Lane& ln, const std::vector<Frag>& acc, const std::vector<Frag>& r,
                               int64_t width, const std::function<Source(int64_t)>& rows) {
    for (size_t e = 0; e < r.size() / 2; ++e) {
      Source m = rows((int64_t)e);
      for (size_t n = 0; n < acc.size(); ++n)
        step.push_back(mmaBf16({acc[n].begin(), acc[n].end()}, fromResults(r[2 * e], r[2 * e + 1]), spreadRows(ln, m, (int64_t)n, width)));
    }
  }

  /// B[k][n] = M[k][spread(n-tile, n)], k < 16: 16 rows as they are, their columns spread
  /// (Lane::spread): V in O = P V.
  static std::vector<ExprRef> spreadRows(const Lane& ln, const Source& m, int64_t tile, int64_t width) {
    std::vector<ExprRef> v;
    for (int i = 0; i < 4; ++i) v.push_back(m(ln.k(i), Lane::spreadCol(tile, ln.g, width)));
    return v;
  }

  /// Blocks start, start + 1, ... (`count` of them, at most `extent`) of a walk, each one's
  /// statements from step(block).
  StmtRef walk(int64_t extent, const ExprRef& start, const ExprRef& count, const std::function<std::vector<StmtRef>(ExprRef)>& step) {
    int j = b.newLoopVar();
    return loopUpTo(j, extent, count, step(B::add(start, loopVar(j))));
  }

  /// The blocks [start, start + count) of a walk, masked or not (the causal diagonal crosses them).
  struct Segment {
    ExprRef start, count;
    bool masked;
  };
  struct Walk {
    ExprRef count;                 ///< blocks in all
    std::vector<Segment> segments; ///< in order
  };
  using Copies = std::function<std::vector<StmtRef>(const ExprRef& stage, const ExprRef& block)>;
  using Work = std::function<std::vector<StmtRef>(const ExprRef& stage, const ExprRef& block, bool masked)>;

  /// A walk of the GPU block's warps together over blocks [0, count) of the other side's rows
  /// (count >= 1, at most `extent`), segment after segment, each block's rows staged in shared
  /// memory one block ahead: copies(stage, jb) starts the copies of block jb into stage 0 or 1,
  /// work(stage, jb, masked) computes on it once they have arrived. The last block's look-ahead
  /// copies it again, harmlessly, into the stage not in use.
  void stagedWalk(int64_t extent, const Walk& walkOver, const Copies& copies, const Work& work) {
    const ExprRef& count = walkOver.count;
    for (StmtRef& c : copies(B::i(0), B::i(0))) body.push_back(std::move(c));
    body.push_back(asyncCommit());
    for (const Segment& seg : walkOver.segments)
      body.push_back(walk(extent, seg.start, seg.count, [&](ExprRef jb) {
        std::vector<StmtRef> step = copies(bitAnd(B::add(jb, B::i(1)), 1), binary(KOp::Min, B::add(jb, B::i(1)), B::sub(count, B::i(1))));
        for (StmtRef s : {asyncCommit(), asyncWait(1), barrier()}) step.push_back(std::move(s));
        for (StmtRef& s : work(bitAnd(jb, 1), jb, seg.masked)) step.push_back(std::move(s));
        step.push_back(barrier()); // every warp is done with this stage before it is copied over
        return step;
      }));
    body.push_back(asyncWait(0));
  }

  /// Blocks of `threads` threads (a multiple of 32), as many of them on an SM at once as make
  /// 8 warps (up to 255 registers a thread: 12 warps at 168 spilled to local memory).
  Kernel finish(int iv, int64_t warps, int64_t threads) {
    Kernel k = b.finish(loop(iv, warps * 32, true, std::move(body)));
    k.gpuOnly = true;
    k.threads = (int)threads;
    k.minBlocks = (int)(256 / threads);
    return k;
  }
};

/// The warps of one GPU block: `warps` (4, else 2 or 1: what divides a problem's `tiles` warps)
/// neighbouring warps of one problem, each owning `rows` rows from the block's first row0 (the
/// blocks of a problem in reverse order with `reversed`: the longest causal walks first).
struct WarpBlock {
  int64_t warps, threads, rows;
  ExprRef tid, head, row0, warpRow0; ///< the thread in its block; the problem; the block's and the warp's first row

  WarpBlock(const Lane& ln, const ExprRef& iv, int64_t tiles, int64_t rows, bool reversed) : rows(rows) {
    warps = tiles % 4 == 0 ? 4 : tiles % 2 == 0 ? 2 : 1;
    threads = 32 * warps;
    tid = binary(KOp::IMod, iv, B::i(threads));
    int64_t perProblem = tiles / warps;
    ExprRef block = binary(KOp::IDiv, ln.warp, B::i(warps)), within = binary(KOp::IMod, block, B::i(perProblem));
    head = binary(KOp::IDiv, block, B::i(perProblem));
    if (reversed) within = B::sub(B::i(perProblem - 1), within);
    row0 = B::mul(within, B::i(warps * rows));
    warpRow0 = B::add(row0, B::mul(binary(KOp::IDiv, tid, B::i(32)), B::i(rows)));
  }
};

/// The walk over blocks of kb keys for the queries [row0, row0 + rows) of a GPU block: without
/// a causal mask all of them; with it the blocks wholly below the diagonal, then those it
/// crosses (masked), so that only those pay for the mask.
Writer::Walk keyWalk(const Geometry& a, const ExprRef& row0, int64_t rows, int64_t kb) {
  if (!a.causal) return {B::i(a.tk / kb), {{B::i(0), B::i(a.tk / kb), false}}};
  ExprRef full = binary(KOp::IDiv, B::add(row0, B::i(1)), B::i(kb));
  ExprRef count = binary(KOp::IDiv, B::add(row0, B::i(rows + kb - 1)), B::i(kb));
  return {count, {{B::i(0), full, false}, {full, B::sub(count, full), true}}};
}

/// A walk's copies over blocks of kb keys: block jb's rows of K and V into a stage of `ks` and `vs`.
Writer::Copies keyValueCopies(Writer& w, const SharedTile& ks, const SharedTile& vs, const WarpBlock& wb, int64_t kb) {
  return [&w, &ks, &vs, &wb, kb](const ExprRef& stage, const ExprRef& jb) {
    ExprRef key0 = B::mul(jb, B::i(kb));
    std::vector<StmtRef> c = ks.copies(w.b, stage, w.a.n.input(1), w.a.rows(wb.head, key0, w.a.tk, 1), wb.tid, wb.threads);
    for (StmtRef& s : vs.copies(w.b, stage, w.a.n.input(2), w.a.rows(wb.head, key0, w.a.tk, 2), wb.tid, wb.threads)) c.push_back(std::move(s));
    return c;
  };
}

/// The column of element i of result fragment `tile` (8 columns each), counted from col0.
ExprRef colOf(const Lane& ln, const ExprRef& col0, int64_t tile, int i) { return B::add(col0, B::add(B::i(tile * 8), ln.col(i))); }

/// max or sum of a row's values held by one lane (elements i and i + 1 of every fragment, i = 0
/// or 2), then over the four lanes holding that row.
ExprRef rowReduce(KOp op, const std::vector<Frag>& fs, int i, ExprRef init) {
  ExprRef r = std::move(init);
  for (const Frag& fr : fs) r = binary(op, binary(op, r, lf(fr[i])), lf(fr[i + 1]));
  return warpReduce(op, r, 4);
}

/// Forward: a warp per kForwardTiles x 16 queries, blocks of 32 keys staged in shared memory for
/// the GPU block's warps, the online softmax of flash attention. The tiles' products with one key
/// or value fragment are side by side, so that the emitter loads it once for all of them (half
/// the loads per product of one tile a warp).
constexpr int kForwardTiles = 2;

Kernel forward(const std::string& name, const Geometry& a) {
  const ir::Value *q = a.n.input(0), *y = a.n.outputs[0], *lse = a.n.outputs[1];
  Writer w(name, a);
  B& b = w.b;
  int iv = b.newLoopVar();
  Lane ln(loopVar(iv));
  const int R = a.tq % (16 * kForwardTiles) == 0 && a.dv <= 64 ? kForwardTiles : 1; // wider rows: the registers of one tile
  int64_t rowsPerWarp = 16 * R, tiles = a.tq / rowsPerWarp, kb = blockFor(a.tk, 32);
  WarpBlock wb(ln, loopVar(iv), tiles, rowsPerWarp, true);
  const ExprRef &head = wb.head, &q0 = wb.warpRow0;
  SharedTile ks(b, kb, a.d), vs(b, kb, a.dv);
  // The running max m in log2 units (exp(x) = 2^(x log2 e), ex2 being the GPU's own); with a
  // positive scale the max of the raw scores is taken and scaled, so that scale, log2 e and
  // the max meet in one multiply-add before each ex2.
  const double c2 = a.scale * M_LOG2E;
  const bool rawMax = c2 > 0;
  std::vector<RowOf> qrows;
  std::vector<std::vector<std::array<int, 8>>> qf;
  std::vector<std::vector<Frag>> o;
  std::vector<std::array<int, 2>> m(R), l(R);
  for (int t = 0; t < R; ++t) {
    qrows.push_back(a.rows(head, B::add(q0, B::i(16 * t)), a.tq));
    qf.push_back(w.operandRows(ln, q, a.rows(head, B::add(q0, B::i(16 * t)), a.tq, 0), a.d));
    o.push_back(w.zeros(a.dv / 8, w.body));
    for (int r = 0; r < 2; ++r) {
      m[t][r] = b.newLocal(), l[t][r] = b.newLocal();
      w.body.push_back(let(m[t][r], f(-INFINITY)));
      w.body.push_back(let(l[t][r], f(0)));
    }
  }
  Writer::Copies copies = keyValueCopies(w, ks, vs, wb, kb);
  // One block of kb keys in `stage`; `masked`: the causal diagonal crosses it for some warp of the GPU block.
  auto block = [&](const ExprRef& stage, const ExprRef& jb, bool masked) {
    std::vector<StmtRef> step;
    ExprRef key0 = B::mul(jb, B::i(kb));
    std::vector<std::vector<Frag>> s;
    for (int t = 0; t < R; ++t) s.push_back(w.zeros(kb / 8, step));
    for (int64_t n = 0; n < kb / 8; ++n) { // S = Q K^T, each key fragment for every tile
      for (int64_t e = 0; e < a.d / 16; ++e) {
        std::vector<ExprRef> kfrag = Writer::contracted(ln, ks.source(stage, B::i(n * 8)), e, a.d);
        for (int t = 0; t < R; ++t) step.push_back(mmaBf16({s[t][n].begin(), s[t][n].end()}, Writer::held(qf[t][e]), kfrag));
      }
    }
    for (int t = 0; t < R; ++t) {
      for (int64_t n = 0; n < kb / 8; ++n)
        for (int i = 0; i < 4; ++i) {
          ExprRef score = rawMax ? lf(s[t][n][i]) : B::mul(lf(s[t][n][i]), f(c2));
          if (masked) score = select(binary(KOp::Le, colOf(ln, key0, n, i), B::add(B::add(q0, B::i(16 * t)), ln.row(i))), score, f(-INFINITY));
          if (masked || !rawMax) step.push_back(set(s[t][n][i], score));
        }
      int mx[2], corr[2];
      for (int r = 0; r < 2; ++r) {
        mx[r] = b.newLocal(), corr[r] = b.newLocal();
        ExprRef top = rowReduce(KOp::Max, s[t], 2 * r, f(-INFINITY));
        step.push_back(let(mx[r], binary(KOp::Max, lf(m[t][r]), rawMax ? B::mul(top, f(c2)) : top)));
        step.push_back(let(corr[r], exp2(B::sub(lf(m[t][r]), lf(mx[r])))));
      }
      for (int64_t n = 0; n < kb / 8; ++n)
        for (int i = 0; i < 4; ++i)
          step.push_back(set(s[t][n][i], exp2(B::sub(rawMax ? B::mul(lf(s[t][n][i]), f(c2)) : lf(s[t][n][i]), lf(mx[i / 2])))));
      for (int r = 0; r < 2; ++r) {
        ExprRef sum = f(0);
        for (const Frag& fr : s[t]) sum = B::add(sum, B::add(lf(fr[2 * r]), lf(fr[2 * r + 1])));
        step.push_back(set(l[t][r], B::add(B::mul(lf(l[t][r]), lf(corr[r])), sum)));
        step.push_back(set(m[t][r], lf(mx[r])));
      }
      for (const Frag& fr : o[t])
        for (int i = 0; i < 4; ++i) step.push_back(set(fr[i], B::mul(lf(fr[i]), lf(corr[i / 2]))));
    }
    for (int64_t e = 0; e < kb / 16; ++e) { // O += P V, each value fragment for every tile
      for (size_t n = 0; n < o[0].size(); ++n) {
        std::vector<ExprRef> vfrag = Writer::spreadRows(ln, vs.source(stage, B::i(e * 16)), (int64_t)n, a.dv);
        for (int t = 0; t < R; ++t)
          step.push_back(mmaBf16({o[t][n].begin(), o[t][n].end()}, Writer::fromResults(s[t][2 * e], s[t][2 * e + 1]), vfrag));
      }
    }
    if (!masked) return step;
    return std::vector<StmtRef>{when(b, binary(KOp::Le, key0, B::add(q0, B::i(rowsPerWarp - 1))), std::move(step))}; // past the warp's last query: nothing
  };
  w.stagedWalk(a.tk / kb, keyWalk(a, wb.row0, wb.warps * rowsPerWarp, kb), copies, block);
  for (int t = 0; t < R; ++t) {
    for (int r = 0; r < 2; ++r) w.body.push_back(set(l[t][r], warpReduce(KOp::Add, lf(l[t][r]), 4)));
    for (int64_t n = 0; n < a.dv / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        ExprRef row = qrows[t](ln.row(i));
        w.body.push_back(b.st(y, B::add(B::mul(row, B::i(a.dv)), Lane::spread(n, ln.col(i), a.dv)), B::div(lf(o[t][n][i]), lf(l[t][i / 2]))));
      }
    for (int r = 0; r < 2; ++r)
      w.body.push_back(b.st(lse, qrows[t](ln.row(2 * r)), B::add(B::mul(lf(m[t][r]), f(M_LN2)), unary(KOp::Log, lf(l[t][r])))));
  }
  return w.finish(iv, a.heads * tiles, wb.threads);
}

/// dq: a warp per 16 queries over blocks of kb keys, staged in shared memory for the GPU block's
/// warps. It also gives delta = dy . y for its rows, which dk and dv read: each lane multiplies
/// the dy elements it holds as operands by y's at the same places, and the four lanes of a row
/// add theirs.
Kernel gradQueries(const std::string& name, const Geometry& a) {
  const ir::Value *q = a.n.input(0), *y = a.n.input(3), *lse = a.n.input(4), *dy = a.n.input(5);
  const ir::Value *dq = a.gradOf(0), *delta = a.n.outputs[3];
  Writer w(name, a);
  B& b = w.b;
  int iv = b.newLoopVar();
  Lane ln(loopVar(iv));
  int64_t tiles = a.tq / 16, kb = blockFor(a.tk, std::max(a.d, a.dv) <= 64 ? 64 : 32); // two stages of K and V within 48 KiB
  WarpBlock wb(ln, loopVar(iv), tiles, 16, true);
  const ExprRef &head = wb.head, &q0 = wb.warpRow0;
  SharedTile ks(b, kb, a.d), vs(b, kb, a.dv);
  RowOf qrows = a.rows(head, q0, a.tq), qIn = a.rows(head, q0, a.tq, 0);
  auto qf = w.operandRows(ln, q, qIn, a.d);
  auto dyf = w.operandRows(ln, dy, qrows, a.dv);
  ExprRef partial[2] = {f(0), f(0)}; // rows g and g + 8 (operandRows' element i: row g + 8 where i % 4 >= 2)
  for (int64_t s = 0; s < a.dv / 16; ++s)
    for (int i = 0; i < 8; ++i) {
      ExprRef at = B::add(B::mul(qrows(i % 4 < 2 ? ln.g : B::add(ln.g, B::i(8))), B::i(a.dv)), ln.dim(s, i & 1, i >= 4, a.dv));
      partial[i % 4 >= 2] = B::add(partial[i % 4 >= 2], B::mul(lf(dyf[s][i]), b.ld(y, at)));
    }
  int rl[2], rd[2];
  for (int r = 0; r < 2; ++r) {
    rl[r] = b.newLocal(), rd[r] = b.newLocal();
    w.body.push_back(let(rl[r], B::mul(b.ld(lse, qrows(ln.row(2 * r))), f(M_LOG2E)))); // in log2 units
    w.body.push_back(let(rd[r], warpReduce(KOp::Add, partial[r], 4)));
    w.body.push_back(when(b, binary(KOp::Eq, ln.t, B::i(0)), {b.st(delta, qrows(ln.row(2 * r)), lf(rd[r]))}));
  }
  auto acc = w.zeros(a.d / 8, w.body);
  Writer::Copies copies = keyValueCopies(w, ks, vs, wb, kb);
  auto block = [&](const ExprRef& stage, const ExprRef& jb, bool masked) {
    std::vector<StmtRef> step;
    ExprRef key0 = B::mul(jb, B::i(kb));
    auto s = w.zeros(kb / 8, step);
    auto dp = w.zeros(kb / 8, step);
    Writer::timesRowsOf(step, ln, s, qf, a.d, [&](int64_t n) { return ks.source(stage, B::i(n * 8)); });
    Writer::timesRowsOf(step, ln, dp, dyf, a.dv, [&](int64_t n) { return vs.source(stage, B::i(n * 8)); });
    for (int64_t n = 0; n < kb / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        ExprRef p = exp2(B::sub(B::mul(lf(s[n][i]), f(a.scale * M_LOG2E)), lf(rl[i / 2])));
        if (masked) p = select(binary(KOp::Le, colOf(ln, key0, n, i), B::add(q0, ln.row(i))), p, f(0));
        step.push_back(set(s[n][i], B::mul(p, B::sub(lf(dp[n][i]), lf(rd[i / 2]))))); // dS
      }
    Writer::resultsTimesRows(step, ln, acc, s, a.d, [&](int64_t e) { return ks.source(stage, B::i(e * 16)); });
    if (!masked) return step;
    return std::vector<StmtRef>{when(b, binary(KOp::Le, key0, B::add(q0, B::i(15))), std::move(step))}; // past the warp's last query: nothing
  };
  w.stagedWalk(a.tk / kb, keyWalk(a, wb.row0, wb.warps * 16, kb), copies, block);
  for (int64_t n = 0; n < a.d / 8; ++n)
    for (int i = 0; i < 4; ++i)
      w.body.push_back(b.st(dq, B::add(B::mul(qIn(ln.row(i)), B::i(a.d)), Lane::spread(n, ln.col(i), a.d)), B::mul(lf(acc[n][i]), f(a.scale))));
  return w.finish(iv, a.heads * tiles, wb.threads);
}

/// dk and dv: a warp per 16 keys over blocks of 32 queries (16 where 32 do not divide them), from
/// the first that sees the GPU block's keys, staged in shared memory for the block's warps with
/// their log-sum-exp and delta.
Kernel gradKeysValues(const std::string& name, const Geometry& a) {
  const ir::Value *q = a.n.input(0), *k = a.n.input(1), *v = a.n.input(2), *lse = a.n.input(4), *dy = a.n.input(5);
  const ir::Value *dk = a.gradOf(1), *dvOut = a.gradOf(2), *delta = a.n.outputs[3];
  Writer w(name, a);
  B& b = w.b;
  int iv = b.newLoopVar();
  Lane ln(loopVar(iv));
  int64_t tiles = a.tk / 16, qb = a.tq % 32 == 0 && std::max(a.d, a.dv) <= 64 ? 32 : 16; // wider rows: the registers of 16
  WarpBlock wb(ln, loopVar(iv), tiles, 16, false); // the longest walks (first keys) first
  const ExprRef &head = wb.head, &k0 = wb.warpRow0;
  RowOf krows = a.rows(head, k0, a.tk, 1), vrows = a.rows(head, k0, a.tk, 2);
  auto kf = w.operandRows(ln, k, krows, a.d);
  auto vf = w.operandRows(ln, v, vrows, a.dv);
  auto dkAcc = w.zeros(a.d / 8, w.body), dvAcc = w.zeros(a.dv / 8, w.body);
  SharedTile qs(b, qb, a.d), dys(b, qb, a.dv);
  SharedRowValues lses(b, qb), deltas(b, qb);
  ExprRef first = a.causal ? wb.row0 : B::i(0); // causal: the queries before the block's keys see none of them
  auto copies = [&](const ExprRef& stage, const ExprRef& jb) {
    ExprRef pos0 = B::add(first, B::mul(jb, B::i(qb)));
    RowOf rows = a.rows(head, pos0, a.tq);
    std::vector<StmtRef> c;
    for (auto part : {qs.copies(b, stage, q, a.rows(head, pos0, a.tq, 0), wb.tid, wb.threads), dys.copies(b, stage, dy, rows, wb.tid, wb.threads),
                      lses.copies(b, stage, lse, rows, wb.tid, wb.threads), deltas.copies(b, stage, delta, rows, wb.tid, wb.threads)})
      c.insert(c.end(), part.begin(), part.end());
    return c;
  };
  // One block of qb queries; `masked`: the causal diagonal crosses it for some warp of the GPU block.
  auto block = [&](const ExprRef& stage, const ExprRef& jb, bool masked) {
    std::vector<StmtRef> step;
    ExprRef qpos0 = B::add(first, B::mul(jb, B::i(qb)));
    auto s = w.zeros(qb / 8, step);
    auto dp = w.zeros(qb / 8, step);
    Writer::timesRowsOf(step, ln, s, kf, a.d, [&](int64_t n) { return qs.source(stage, B::i(n * 8)); });
    Writer::timesRowsOf(step, ln, dp, vf, a.dv, [&](int64_t n) { return dys.source(stage, B::i(n * 8)); });
    for (int64_t n = 0; n < qb / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        ExprRef r = colOf(ln, B::i(0), n, i); // the query within the block
        ExprRef pt = exp2(B::sub(B::mul(lf(s[n][i]), f(a.scale * M_LOG2E)), B::mul(lses.at(stage, r), f(M_LOG2E)))); // in log2 units
        if (masked) pt = select(binary(KOp::Ge, B::add(qpos0, r), B::add(k0, ln.row(i))), pt, f(0));
        int p = b.newLocal();
        step.push_back(let(p, pt));
        step.push_back(set(s[n][i], lf(p)));                                                        // P^T
        step.push_back(set(dp[n][i], B::mul(lf(p), B::sub(lf(dp[n][i]), deltas.at(stage, r))))); // dS^T
      }
    Writer::resultsTimesRows(step, ln, dvAcc, s, a.dv, [&](int64_t e) { return dys.source(stage, B::i(e * 16)); });
    Writer::resultsTimesRows(step, ln, dkAcc, dp, a.d, [&](int64_t e) { return qs.source(stage, B::i(e * 16)); });
    if (!masked) return step;
    return std::vector<StmtRef>{when(b, binary(KOp::Ge, B::add(qpos0, B::i(qb - 1)), k0), std::move(step))}; // before the warp's keys: nothing
  };
  ExprRef count = binary(KOp::IDiv, B::sub(B::i(a.tq), first), B::i(qb));
  Writer::Walk walk{count, {{B::i(0), count, false}}};
  if (a.causal) { // the blocks the diagonal crosses for some warp of the GPU block, then the others
    ExprRef crossed = binary(KOp::Min, B::i(wb.warps * 16 / qb), count);
    walk.segments = {{B::i(0), crossed, true}, {crossed, B::sub(count, crossed), false}};
  }
  w.stagedWalk(a.tq / qb, walk, copies, block);
  for (int64_t n = 0; n < a.d / 8; ++n)
    for (int i = 0; i < 4; ++i) {
      ExprRef at = B::add(B::mul(krows(ln.row(i)), B::i(a.d)), Lane::spread(n, ln.col(i), a.d));
      w.body.push_back(b.st(dk, at, B::mul(lf(dkAcc[n][i]), f(a.scale))));
    }
  for (int64_t n = 0; n < a.dv / 8; ++n)
    for (int i = 0; i < 4; ++i)
      w.body.push_back(b.st(dvOut, B::add(B::mul(vrows(ln.row(i)), B::i(a.dv)), Lane::spread(n, ln.col(i), a.dv)), lf(dvAcc[n][i])));
  return w.finish(iv, a.heads * tiles, wb.threads);
}

} // namespace

Expected<std::optional<std::vector<Kernel>>> attentionGpu(const std::string& name, const ir::Node& n) {
  Geometry a(n);
  if (!a.fits()) return std::optional<std::vector<Kernel>>();
  if (n.op == ir::Op::FusedAttention) return std::optional<std::vector<Kernel>>(std::vector<Kernel>{forward(name + "_fwd", a)});
  // delta is written by the first kernel and read by the second.
  return std::optional<std::vector<Kernel>>(std::vector<Kernel>{gradQueries(name + "_dq", a), gradKeysValues(name + "_dkv", a)});
}

} // namespace sgc::kir
