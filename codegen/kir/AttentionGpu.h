// The pieces the GPU forms of FusedAttention and its gradient are written with (internal to
// LowerAttentionGpu.cpp, the tensor-core kernels of every GPU since sm_80, and
// LowerAttentionHopper.cpp, the warpgroup ones of sm_90): a lane's place in the tensor cores'
// fragments, the problem's geometry, operand tiles in a GPU block's shared memory and the staged
// walk over the other side's rows.
#pragma once
#include "codegen/kir/AttentionGeometry.h"
#include "codegen/kir/Builder.h"
#include "codegen/kir/LowerOps.h"

#include <array>
#include <cmath>
#include <functional>

namespace sgc::kir::attention {
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

  /// Where a lane's A operand element i (0..7, mmaBf16's a0..a7) of k-step s lies in a contracted
  /// dim: permuted(width) as Lane::dim places it (mma.sync, both operands from registers: a lane
  /// loads two k-steps at once), natural() in the dim's own order (a warpgroup product, whose B the
  /// tensor cores read from shared memory in that order).
  using ColOrder = std::function<ExprRef(int64_t s, int i)>;
  ColOrder permuted(int64_t width) const {
    return [ln = *this, width](int64_t s, int i) { return ln.dim(s, i & 1, i >= 4, width); };
  }
  ColOrder natural() const {
    return [ln = *this](int64_t s, int i) { return B::add(B::i(16 * s), ln.k((i & 1) + (i >= 4 ? 2 : 0))); };
  }

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
  /// with `which` >= 0 of operand `which` (0 q, 1 k, 2 v; they differ where packed or where the
  /// result has its own layout, and k and v where grouped: problem p / group's).
  RowOf rows(const ExprRef& p, const ExprRef& pos0, int64_t len, int which = -1) const {
    bool inPacked = packed && which >= 0, headsAfter = which < 0 ? resultBthd : bthd;
    ExprRef problem = which > 0 && group > 1 ? binary(KOp::IDiv, p, B::i(group)) : p;
    return [this, problem, pos0, len, which, inPacked, headsAfter](const ExprRef& r) {
      ExprRef pos = B::add(pos0, r);
      const ExprRef& p = problem;
      if (!headsAfter) return B::add(B::mul(p, B::i(len)), pos);
      ExprRef position = B::add(B::mul(binary(KOp::IDiv, p, B::i(h)), B::i(len)), pos), head = binary(KOp::IMod, p, B::i(h));
      if (!inPacked) return B::add(B::mul(position, B::i(h)), head);
      return B::add(B::mul(position, B::i(3 * h)), B::add(B::i(which * h), head));
    };
  }

  /// The rows of operand `which`'s gradient (dk and dv per query head when grouped, [..., H, T, D]).
  RowOf gradRows(const ExprRef& p, const ExprRef& pos0, int64_t len, int which) const {
    if (group == 1) return rows(p, pos0, len, which);
    return [p, pos0, len](const ExprRef& r) { return B::add(B::mul(p, B::i(len)), B::add(pos0, r)); };
  }

  /// Whether the tensor-core kernels apply: bf16 operands, every size a multiple of 16.
  bool fits() const {
    for (size_t i = 0; i < 3; ++i)
      if (n.input(i)->type.dtype != ir::DType::BF16) return false;
    return heads > 0 && tq % 16 == 0 && tk % 16 == 0 && d % 16 == 0 && dv % 16 == 0 && (!causal || tq == tk);
  }
};

inline ExprRef f(double v) { return B::c(v, Scalar::F32); }

inline ExprRef lf(int id) { return local(id, Scalar::F32); }

/// The largest of 64, 32, 16 that divides n.
inline int64_t blockFor(int64_t n, int64_t most) {
  int64_t b = most;
  while (n % b) b /= 2;
  return b;
}

inline ExprRef bitAnd(const ExprRef& x, int64_t m) { return binary(KOp::And, x, B::i(m)); }
inline ExprRef shl(const ExprRef& x, int64_t n) { return binary(KOp::Shl, x, B::i(n)); }

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

/// `rows` x `width` bf16 elements of an operand of warpgroup products in a block's shared memory,
/// two stages as SharedTile's (or one), in wgmma's 128-byte swizzled layout (kir::wgmmaTileOffset;
/// the width a multiple of 64): the same bytes are a K-major operand where the width is contracted
/// (K in S = Q K^T) and an MN-major one where the rows are (V in O = P V).
struct WgTile {
  int array;
  int64_t rows, width;

  WgTile(B& b, int64_t rows, int64_t width, int64_t stages = 2) : array((int)b.k.shared.size()), rows(rows), width(width) {
    b.k.shared.push_back({ir::DType::BF16, stages * rows * width, 1024});
  }

  ExprRef stageBytes(const ExprRef& stage) const { return B::mul(stage, B::i(rows * width * 2)); }

  /// The tile as B of a product contracting its columns [16e, 16e + 16): its rows are B's columns
  /// (or, 64 of them, A's rows).
  WgmmaTile contracted(const ExprRef& stage, int64_t e) const {
    return {array, B::add(stageBytes(stage), B::i((16 * e / 64) * rows * 128 + (16 * e % 64) * 2)), rows, false};
  }

  /// The tile's rows [16e, 16e + 16) as B of a product contracting them: its columns are B's.
  WgmmaTile rowsOf(const ExprRef& stage, int64_t e) const { return {array, B::add(stageBytes(stage), B::i(2048 * e)), rows, true}; }

  /// The element (of the shared array) that holds the tile's (row, col) in stage `stage`.
  ExprRef element(const ExprRef& stage, const ExprRef& row, const ExprRef& col) const {
    return binary(KOp::Shr, B::add(stageBytes(stage), wgmmaTileOffset(row, col, rows)), B::i(1));
  }

  /// The copies of a stage's bytes as they lie in `m` from element `first` on (stored there in
  /// the tile's own layout: a bulkStore of a stage), 16 bytes a copy, spread over the block's
  /// `threads` threads.
  std::vector<StmtRef> stageCopies(B& b, const ExprRef& stage, const ir::Value* m, const ExprRef& first, const ExprRef& tid, int64_t threads) const {
    std::vector<StmtRef> out;
    int64_t total = rows * width / 8;
    for (int64_t c0 = 0; c0 < total; c0 += threads) {
      ExprRef at = B::mul(B::add(B::i(c0), tid), B::i(8)); // the chunk's first element
      StmtRef copy = copyAsync(array, B::add(B::mul(stage, B::i(rows * width)), at), b.buf(m), B::add(first, at));
      out.push_back(c0 + threads <= total ? copy : when(b, binary(KOp::Lt, at, B::i(rows * width)), {copy}));
    }
    return out;
  }

  /// The copies of `m`'s rows rowOf(0..rows-1) into stage `stage`, 16 bytes a copy, spread over
  /// the block's `threads` threads (`tid` the thread's index in its block).
  std::vector<StmtRef> copies(B& b, const ExprRef& stage, const ir::Value* m, const RowOf& rowOf, const ExprRef& tid, int64_t threads) const {
    std::vector<StmtRef> out;
    int64_t perRow = width / 8, total = rows * perRow;
    for (int64_t c0 = 0; c0 < total; c0 += threads) {
      ExprRef chunk = B::add(B::i(c0), tid);
      ExprRef row = binary(KOp::IDiv, chunk, B::i(perRow)), col = B::mul(binary(KOp::IMod, chunk, B::i(perRow)), B::i(8));
      ExprRef at = binary(KOp::Shr, B::add(stageBytes(stage), wgmmaTileOffset(row, col, rows)), B::i(1)); // bytes -> elements
      StmtRef copy = copyAsync(array, at, b.buf(m), B::add(B::mul(rowOf(row), B::i(width)), col));
      out.push_back(c0 + threads <= total ? copy : when(b, binary(KOp::Lt, chunk, B::i(total)), {copy}));
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
  /// `width` wide, contracted; its columns in the order `col`: Lane::permuted or Lane::natural),
  /// one per 16 columns, held in locals (bf16 ones for a bf16 `m`: half a register each).
  std::vector<std::array<int, 8>> operandRows(const Lane& ln, const ir::Value* m, const RowOf& row, int64_t width, const Lane::ColOrder& col) {
    std::vector<std::array<int, 8>> fs(width / 16);
    for (int64_t s = 0; s < width / 16; ++s)
      for (int i = 0; i < 8; ++i) {
        ExprRef r = row(i % 4 < 2 ? ln.g : B::add(ln.g, B::i(8)));
        fs[s][i] = b.newLocal();
        ExprRef v = b.ld(m, B::add(B::mul(r, B::i(width)), col(s, i)));
        body.push_back(m->type.dtype == ir::DType::BF16 ? letBf16(fs[s][i], v) : let(fs[s][i], v));
      }
    return fs;
  }

  static std::vector<int> accOf(const std::vector<Frag>& fs) {
    std::vector<int> ids;
    for (const Frag& fr : fs) ids.insert(ids.end(), fr.begin(), fr.end());
    return ids;
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
  /// With `forWgmma` each thread also fences its arrived copies for the warpgroup products, which
  /// read shared memory through the async proxy. `after(stage, jb)`, when given, follows each
  /// block's closing barrier (when every warp is done with it).
  void stagedWalk(int64_t extent, const Walk& walkOver, const Copies& copies, const Work& work, bool forWgmma = false, const Copies& after = {}) {
    const ExprRef& count = walkOver.count;
    for (StmtRef& c : copies(B::i(0), B::i(0))) body.push_back(std::move(c));
    body.push_back(asyncCommit());
    for (const Segment& seg : walkOver.segments)
      body.push_back(walk(extent, seg.start, seg.count, [&](ExprRef jb) {
        std::vector<StmtRef> step = copies(bitAnd(B::add(jb, B::i(1)), 1), binary(KOp::Min, B::add(jb, B::i(1)), B::sub(count, B::i(1))));
        step.push_back(asyncCommit());
        step.push_back(asyncWait(1));
        if (forWgmma) step.push_back(fenceProxyAsync());
        step.push_back(barrier());
        for (StmtRef& s : work(bitAnd(jb, 1), jb, seg.masked)) step.push_back(std::move(s));
        step.push_back(barrier()); // every warp is done with this stage before it is copied over
        if (after)
          for (StmtRef& s : after(bitAnd(jb, 1), jb)) step.push_back(std::move(s));
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
inline Writer::Walk keyWalk(const Geometry& a, const ExprRef& row0, int64_t rows, int64_t kb) {
  if (!a.causal) return {B::i(a.tk / kb), {{B::i(0), B::i(a.tk / kb), false}}};
  ExprRef full = binary(KOp::IDiv, B::add(row0, B::i(1)), B::i(kb));
  ExprRef count = binary(KOp::IDiv, B::add(row0, B::i(rows + kb - 1)), B::i(kb));
  return {count, {{B::i(0), full, false}, {full, B::sub(count, full), true}}};
}

/// A walk's copies over blocks of kb keys: block jb's rows of K and V into a stage of `ks` and `vs`
/// (SharedTile or WgTile).
template <class Tile>
Writer::Copies keyValueCopies(Writer& w, const Tile& ks, const Tile& vs, const WarpBlock& wb, int64_t kb) {
  return [&w, &ks, &vs, &wb, kb](const ExprRef& stage, const ExprRef& jb) {
    ExprRef key0 = B::mul(jb, B::i(kb));
    std::vector<StmtRef> c = ks.copies(w.b, stage, w.a.n.input(1), w.a.rows(wb.head, key0, w.a.tk, 1), wb.tid, wb.threads);
    for (StmtRef& s : vs.copies(w.b, stage, w.a.n.input(2), w.a.rows(wb.head, key0, w.a.tk, 2), wb.tid, wb.threads)) c.push_back(std::move(s));
    return c;
  };
}

/// The column of element i of result fragment `tile` (8 columns each), counted from col0.
inline ExprRef colOf(const Lane& ln, const ExprRef& col0, int64_t tile, int i) { return B::add(col0, B::add(B::i(tile * 8), ln.col(i))); }

/// max or sum of a row's values held by one lane (elements i and i + 1 of every fragment, i = 0
/// or 2), then over the four lanes holding that row.
inline ExprRef rowReduce(KOp op, const std::vector<Frag>& fs, int i, ExprRef init) {
  ExprRef r = std::move(init);
  for (const Frag& fr : fs) r = binary(op, binary(op, r, lf(fr[i])), lf(fr[i + 1]));
  return warpReduce(op, r, 4);
}

/// The forward pass's running max `m` and sum `l` of a warp's rows g and g + 8: -inf and 0.
inline void runningStats(Writer& w, std::array<int, 2>& m, std::array<int, 2>& l) {
  for (int r = 0; r < 2; ++r) {
    m[r] = w.b.newLocal(), l[r] = w.b.newLocal();
    w.body.push_back(let(m[r], f(-INFINITY)));
    w.body.push_back(let(l[r], f(0)));
  }
}

/// The forward pass's results for a warp's 16 rows (`qrows` maps 0..15 to flat rows): y = O (1 / l)
/// (one division a row, not one an element), O's element i of fragment n in column col(n, i), and
/// the log-sum-exp m ln 2 + log l.
inline void forwardResults(Writer& w, const Lane& ln, const RowOf& qrows, const std::vector<Frag>& o, const std::array<int, 2>& m,
                           const std::array<int, 2>& l, const std::function<ExprRef(int64_t n, int i)>& col) {
  const ir::Value *y = w.a.n.outputs[0], *lse = w.a.n.outputs[1];
  int inv[2];
  for (int r = 0; r < 2; ++r) {
    w.body.push_back(set(l[r], warpReduce(KOp::Add, lf(l[r]), 4)));
    inv[r] = w.b.newLocal();
    w.body.push_back(let(inv[r], B::div(f(1), lf(l[r]))));
  }
  for (size_t n = 0; n < o.size(); ++n)
    for (int i = 0; i < 4; ++i)
      w.body.push_back(w.b.st(y, B::add(B::mul(qrows(ln.row(i)), B::i(w.a.dv)), col((int64_t)n, i)), B::mul(lf(o[n][i]), lf(inv[i / 2]))));
  for (int r = 0; r < 2; ++r)
    w.body.push_back(w.b.st(lse, qrows(ln.row(2 * r)), B::add(B::mul(lf(m[r]), f(M_LN2)), unary(KOp::Log, lf(l[r])))));
}

/// The forward pass's online softmax for one block of keys of a warp's 16 rows, as statements of
/// `step`: the scores `s` (the block's result fragments, 8 keys each) scaled by c2 = scale log2 e
/// (kept raw when c2 > 0: the max is taken raw, then scaled, so that scale, log2 e and the max
/// meet in one multiply-add before each ex2) and, with `masked`, those of keys past each row's
/// query (key0 the block's first key, row0 the tile's first query) made -inf; the running max `m`
/// (log2 units) and sum `l` of rows g and g + 8 updated; `s` made P; the rows' output fragments
/// `o` rescaled by the change of the max.
inline void onlineSoftmax(B& b, std::vector<StmtRef>& step, const Lane& ln, const std::vector<Frag>& s, const std::array<int, 2>& m,
                          const std::array<int, 2>& l, const std::vector<Frag>& o, double c2, bool masked, const ExprRef& key0,
                          const ExprRef& row0) {
  const bool rawMax = c2 > 0;
  for (size_t n = 0; n < s.size(); ++n)
    for (int i = 0; i < 4; ++i) {
      ExprRef score = rawMax ? lf(s[n][i]) : B::mul(lf(s[n][i]), f(c2));
      if (masked) score = select(binary(KOp::Le, colOf(ln, key0, (int64_t)n, i), B::add(row0, ln.row(i))), score, f(-INFINITY));
      if (masked || !rawMax) step.push_back(set(s[n][i], score));
    }
  int mx[2], corr[2];
  for (int r = 0; r < 2; ++r) {
    mx[r] = b.newLocal(), corr[r] = b.newLocal();
    ExprRef top = rowReduce(KOp::Max, s, 2 * r, f(-INFINITY));
    step.push_back(let(mx[r], binary(KOp::Max, lf(m[r]), rawMax ? B::mul(top, f(c2)) : top)));
    step.push_back(let(corr[r], exp2(B::sub(lf(m[r]), lf(mx[r])))));
  }
  for (const Frag& fr : s)
    for (int i = 0; i < 4; ++i) step.push_back(set(fr[i], exp2(B::sub(rawMax ? B::mul(lf(fr[i]), f(c2)) : lf(fr[i]), lf(mx[i / 2])))));
  for (int r = 0; r < 2; ++r) {
    ExprRef sum = f(0);
    for (const Frag& fr : s) sum = B::add(sum, B::add(lf(fr[2 * r]), lf(fr[2 * r + 1])));
    step.push_back(set(l[r], B::add(B::mul(lf(l[r]), lf(corr[r])), sum)));
    step.push_back(set(m[r], lf(mx[r])));
  }
  for (const Frag& fr : o)
    for (int i = 0; i < 4; ++i) step.push_back(set(fr[i], B::mul(lf(fr[i]), lf(corr[i / 2]))));
}

/// The dq kernels' values of a warp's rows g and g + 8 (`qrows` maps 0..15 to flat rows), as
/// locals: the log-sum-exp in log2 units (rl) and delta = dy . y (rd), which the kernel also
/// stores for dk and dv: each lane multiplies the dy elements it holds as operands (`dyf`, loaded in
/// the column order `col`) by y's at the same places, and the four lanes of a row add theirs.
struct RowValues {
  int rl[2], rd[2];
};
inline RowValues rowValues(Writer& w, const Lane& ln, const std::vector<std::array<int, 8>>& dyf, const RowOf& qrows, const Lane::ColOrder& col) {
  const Geometry& a = w.a;
  const ir::Value *y = a.n.input(3), *lse = a.n.input(4), *delta = a.n.outputs[3];
  ExprRef partial[2] = {f(0), f(0)}; // rows g and g + 8 (an operand's element i: row g + 8 where i % 4 >= 2)
  for (int64_t s = 0; s < a.dv / 16; ++s)
    for (int i = 0; i < 8; ++i) {
      ExprRef at = B::add(B::mul(qrows(i % 4 < 2 ? ln.g : B::add(ln.g, B::i(8))), B::i(a.dv)), col(s, i));
      partial[i % 4 >= 2] = B::add(partial[i % 4 >= 2], B::mul(lf(dyf[s][i]), w.b.ld(y, at)));
    }
  RowValues v;
  for (int r = 0; r < 2; ++r) {
    v.rl[r] = w.b.newLocal(), v.rd[r] = w.b.newLocal();
    w.body.push_back(let(v.rl[r], B::mul(w.b.ld(lse, qrows(ln.row(2 * r))), f(M_LOG2E)))); // in log2 units
    w.body.push_back(let(v.rd[r], warpReduce(KOp::Add, partial[r], 4)));
    w.body.push_back(when(w.b, binary(KOp::Eq, ln.t, B::i(0)), {w.b.st(delta, qrows(ln.row(2 * r)), lf(v.rd[r]))}));
  }
  return v;
}

/// The dk/dv kernels' copies of a block of qb queries from `first` on: their rows of Q and dO into
/// a stage of `qs` and `dys` (SharedTile or WgTile), their log-sum-exp and delta into `lses` and `deltas`.
template <class Tile>
Writer::Copies queryBlockCopies(Writer& w, const Tile& qs, const Tile& dys, const SharedRowValues& lses, const SharedRowValues& deltas,
                                const WarpBlock& wb, const ExprRef& first, int64_t qb) {
  return [&w, &qs, &dys, &lses, &deltas, &wb, first, qb](const ExprRef& stage, const ExprRef& jb) {
    const Geometry& a = w.a;
    const ir::Value *q = a.n.input(0), *lse = a.n.input(4), *dy = a.n.input(5), *delta = a.n.outputs[3];
    ExprRef pos0 = B::add(first, B::mul(jb, B::i(qb)));
    RowOf rows = a.rows(wb.head, pos0, a.tq);
    std::vector<StmtRef> c;
    for (auto part : {qs.copies(w.b, stage, q, a.rows(wb.head, pos0, a.tq, 0), wb.tid, wb.threads), dys.copies(w.b, stage, dy, rows, wb.tid, wb.threads),
                      lses.copies(w.b, stage, lse, rows, wb.tid, wb.threads), deltas.copies(w.b, stage, delta, rows, wb.tid, wb.threads)})
      c.insert(c.end(), part.begin(), part.end());
    return c;
  };
}

/// The dk/dv kernels' walk over blocks of qb queries from `first` (the GPU block's first key when
/// causal, else 0) to the end: with a causal mask the blocks the diagonal crosses for some of the
/// GPU block's `keys` rows first (masked), then the others.
inline Writer::Walk queryWalk(const Geometry& a, const ExprRef& first, int64_t qb, int64_t keys) {
  ExprRef count = binary(KOp::IDiv, B::sub(B::i(a.tq), first), B::i(qb));
  Writer::Walk walk{count, {{B::i(0), count, false}}};
  if (!a.causal) return walk;
  ExprRef crossed = binary(KOp::Min, B::i(keys / qb), count);
  walk.segments = {{B::i(0), crossed, true}, {crossed, B::sub(count, crossed), false}};
  return walk;
}

/// The dk/dv kernels' step between their products: from S^T (`s`, a warp's 16 keys by the block's
/// queries) and dP^T (`dp`), P^T = exp(scale S^T - lse) into `s` and dS^T = P^T (dP^T - delta)
/// into `dp`, with `masked` zero where a query (qpos0 + its column) comes before the key (k0 + its row).
inline void keyGradients(B& b, std::vector<StmtRef>& step, const Lane& ln, const std::vector<Frag>& s, const std::vector<Frag>& dp,
                         const SharedRowValues& lses, const SharedRowValues& deltas, const ExprRef& stage, double scale, bool masked,
                         const ExprRef& qpos0, const ExprRef& k0) {
  for (size_t n = 0; n < s.size(); ++n)
    for (int i = 0; i < 4; ++i) {
      ExprRef r = colOf(ln, B::i(0), (int64_t)n, i); // the query within the block
      ExprRef pt = exp2(B::sub(B::mul(lf(s[n][i]), f(scale * M_LOG2E)), B::mul(lses.at(stage, r), f(M_LOG2E)))); // in log2 units
      if (masked) pt = select(binary(KOp::Ge, B::add(qpos0, r), B::add(k0, ln.row(i))), pt, f(0));
      int p = b.newLocal();
      step.push_back(let(p, pt));
      step.push_back(set(s[n][i], lf(p)));                                                        // P^T
      step.push_back(set(dp[n][i], B::mul(lf(p), B::sub(lf(dp[n][i]), deltas.at(stage, r))))); // dS^T
    }
}

/// The scratch of a gradient that stores dS^T (FusedAttentionGrad's fifth result): for each
/// problem, a block of 64 x 64 bf16 (its keys by its queries, as a WgTile of 64 rows lays them
/// out) per pair of 64 keys and 64 queries that see each other, key block after key block; with
/// a causal mask key block j's are those of query blocks j, j + 1, ... (T / 64 (T / 64 + 1) / 2
/// blocks a problem).
struct ScoreBlocks {
  const ir::Value* scratch;
  int64_t kblocks, qblocks, perProblem;
  bool triangle;

  explicit ScoreBlocks(const Geometry& a)
      : scratch(a.n.outputs.size() > 4 ? a.n.outputs[4] : nullptr), kblocks(a.tk / 64), qblocks(a.tq / 64), triangle(a.causal) {
    perProblem = triangle ? kblocks * (kblocks + 1) / 2 : kblocks * qblocks;
  }

  /// The block of problem p's key block j and query block i (i >= j with a causal mask).
  ExprRef block(const ExprRef& p, const ExprRef& j, const ExprRef& i) const {
    ExprRef within = triangle ? B::add(B::sub(B::mul(j, B::i(qblocks)), binary(KOp::IDiv, B::mul(j, B::sub(j, B::i(1))), B::i(2))), B::sub(i, j))
                              : B::add(B::mul(j, B::i(qblocks)), i);
    return B::add(B::mul(p, B::i(perProblem)), within);
  }
};

/// The Hopper forms (LowerAttentionHopper.cpp): whether they apply, and the kernels. With the
/// gradient's scratch (storesScoreGradients) the dK/dV kernel stores dS^T there after delta's
/// kernel, and the dq kernel reads it: five products a block pair in all rather than seven.
bool forwardFitsWgmma(const Geometry& a);
bool gradFitsWgmma(const Geometry& a);
bool storesScoreGradients(const Geometry& a);
int64_t scoreScratchElements(const Geometry& a);
Kernel forwardWgmma(const std::string& name, const Geometry& a);
Kernel gradQueriesWgmma(const std::string& name, const Geometry& a);
Kernel gradKeysValuesWgmma(const std::string& name, const Geometry& a);
Kernel gradDelta(const std::string& name, const Geometry& a);
Kernel gradQueriesStoredWgmma(const std::string& name, const Geometry& a);

} // namespace sgc::kir::attention
