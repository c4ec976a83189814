#include "codegen/kir/Simulate.h"

#include "ir/Float.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>

namespace sgc::kir {
namespace {

/// One thread's value of an expression: `f` for f32 and f64, `i` for i64 and i1 (0 or 1).
struct Val {
  double f = 0;
  int64_t i = 0;
};
using Lanes = std::vector<Val>; ///< a value per thread of the block
using Mask = std::vector<char>; ///< the threads that run a statement

bool isFloating(Scalar t) { return t == Scalar::F32 || t == Scalar::F64; }
double rounded(Scalar t, double x) { return t == Scalar::F32 ? (double)(float)x : x; }

double unaryFloat(KOp op, double x) {
  switch (op) {
  case KOp::Neg: return -x;
  case KOp::Abs: return std::fabs(x);
  case KOp::Exp: return std::exp(x);
  case KOp::Exp2: return std::exp2(x);
  case KOp::Expm1: return std::expm1(x);
  case KOp::Log: return std::log(x);
  case KOp::Log1p: return std::log1p(x);
  case KOp::Sqrt: return std::sqrt(x);
  case KOp::Floor: return std::floor(x);
  case KOp::Ceil: return std::ceil(x);
  case KOp::RoundEven: return std::nearbyint(x);
  case KOp::Tanh: return std::tanh(x);
  case KOp::Erf: return std::erf(x);
  case KOp::Sin: return std::sin(x);
  case KOp::Cos: return std::cos(x);
  case KOp::Atan: return std::atan(x);
  case KOp::RoundBf16: return ir::fromBF16(ir::toBF16(x));
  case KOp::RoundF16: return ir::fromF16(ir::toF16(x));
  default: return NAN;
  }
}

/// Float min and max propagate NaN (LLVM's minimum and maximum).
double minMax(KOp op, double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  return op == KOp::Min ? std::min(a, b) : std::max(a, b);
}

double binaryFloat(KOp op, double a, double b) {
  switch (op) {
  case KOp::Add: return a + b;
  case KOp::Sub: return a - b;
  case KOp::Mul: return a * b;
  case KOp::Div: return a / b;
  case KOp::Pow: return std::pow(a, b);
  case KOp::Rem: return std::fmod(a, b);
  case KOp::Min: case KOp::Max: return minMax(op, a, b);
  default: return NAN;
  }
}

bool compare(KOp op, double a, double b) {
  switch (op) {
  case KOp::Eq: return a == b;
  case KOp::Ne: return !(a == b); // unordered too
  case KOp::Lt: return a < b;
  case KOp::Le: return a <= b;
  case KOp::Gt: return a > b;
  default: return a >= b;
  }
}

bool compareInt(KOp op, int64_t a, int64_t b) {
  switch (op) {
  case KOp::Eq: return a == b;
  case KOp::Ne: return a != b;
  case KOp::Lt: return a < b;
  case KOp::Le: return a <= b;
  case KOp::Gt: return a > b;
  default: return a >= b;
  }
}

bool isComparison(KOp op) { return op == KOp::Eq || op == KOp::Ne || op == KOp::Lt || op == KOp::Le || op == KOp::Gt || op == KOp::Ge; }

/// A buffer or shared element of dtype `dt` at `p`, as scalar type `want` computes on it.
Val loadAs(const unsigned char* p, ir::DType dt, Scalar want) {
  double f = 0;
  int64_t i = 0;
  bool floating = true;
  switch (dt) {
  case ir::DType::F32: { float x; memcpy(&x, p, 4); f = x; break; }
  case ir::DType::F64: memcpy(&f, p, 8); break;
  case ir::DType::BF16: { uint16_t x; memcpy(&x, p, 2); f = ir::fromBF16(x); break; }
  case ir::DType::F16: { uint16_t x; memcpy(&x, p, 2); f = ir::fromF16(x); break; }
  case ir::DType::I64: case ir::DType::U64: memcpy(&i, p, 8), floating = false; break;
  case ir::DType::I32: { int32_t x; memcpy(&x, p, 4); i = x; floating = false; break; }
  case ir::DType::U32: { uint32_t x; memcpy(&x, p, 4); i = x; floating = false; break; }
  case ir::DType::I16: { int16_t x; memcpy(&x, p, 2); i = x; floating = false; break; }
  case ir::DType::U16: { uint16_t x; memcpy(&x, p, 2); i = x; floating = false; break; }
  case ir::DType::I8: i = (int8_t)*p, floating = false; break;
  case ir::DType::U8: i = *p, floating = false; break;
  case ir::DType::Bool: i = *p != 0, floating = false; break;
  default: break;
  }
  Val v;
  if (isFloating(want)) v.f = rounded(want, floating ? f : (double)i);
  else v.i = floating ? (int64_t)f : i;
  return v;
}

void storeAs(unsigned char* p, ir::DType dt, Scalar from, Val v) {
  double f = isFloating(from) ? v.f : (double)v.i;
  int64_t i = isFloating(from) ? (int64_t)v.f : v.i;
  switch (dt) {
  case ir::DType::F32: { float x = (float)f; memcpy(p, &x, 4); break; }
  case ir::DType::F64: memcpy(p, &f, 8); break;
  case ir::DType::BF16: { uint16_t x = ir::toBF16(f); memcpy(p, &x, 2); break; }
  case ir::DType::F16: { uint16_t x = ir::toF16(f); memcpy(p, &x, 2); break; }
  case ir::DType::I64: case ir::DType::U64: memcpy(p, &i, 8); break;
  case ir::DType::I32: case ir::DType::U32: { int32_t x = (int32_t)i; memcpy(p, &x, 4); break; }
  case ir::DType::I16: case ir::DType::U16: { int16_t x = (int16_t)i; memcpy(p, &x, 2); break; }
  case ir::DType::I8: case ir::DType::U8: case ir::DType::Bool: *p = (unsigned char)i; break;
  default: break;
  }
}

class Simulator {
public:
  Simulator(const Kernel& k, const std::vector<void*>& buffers) : k_(k), buffers_(buffers) {}

  Error run() {
    if (buffers_.size() != k_.buffers.size())
      return makeError(k_.name + ": " + std::to_string(buffers_.size()) + " buffers given for its " + std::to_string(k_.buffers.size()));
    const Stmt& top = *k_.body;
    if (top.kind == StmtKind::Loop && top.parallel) grid(top);
    else if (isHorizontal(k_))
      for (const StmtRef& part : top.body) grid(*part);
    else {
      start(1);
      exec(top, Mask(1, 1));
    }
    if (!error_.empty()) return makeError(k_.name + ": " + error_);
    return Error::success();
  }

private:
  /// Parallel loop `loop` as a grid of blocks of k.threads iterations, each block run alone.
  void grid(const Stmt& loop) {
    int threads = k_.threads;
    // (of this loop alone: a horizontal kernel's parts may differ)
    if (hasWarpOps(loop) && loop.extent % 32) return fail("warp operations in a parallel loop of " + std::to_string(loop.extent) + " iterations, not whole warps");
    if (hasBlockOps(loop) && loop.extent % threads)
      return fail("shared memory in a parallel loop of " + std::to_string(loop.extent) + " iterations, not whole blocks of " + std::to_string(threads));
    for (int64_t first = 0; first < loop.extent && error_.empty(); first += threads) {
      start(threads);
      Mask m(threads, 0);
      for (int t = 0; t < threads; ++t) {
        m[t] = first + t < loop.extent;
        vars_[loop.id][t] = first + t;
      }
      for (const StmtRef& s : loop.body) exec(*s, m);
      for (int t = 0; t < threads && error_.empty(); ++t)
        if (!bulkOpen_[t].empty() || !bulkGroups_[t].empty()) fail("thread " + std::to_string(t) + "'s bulk copies are in flight at its block's end");
    }
  }

  /// A fresh block of `threads` threads: locals and shared memory NaN, no copies in flight.
  void start(int threads) {
    T_ = threads;
    vars_.assign(k_.numLoopVars, std::vector<int64_t>(threads, 0));
    locals_.assign(k_.numLocals, Lanes(threads, Val{NAN, std::numeric_limits<int64_t>::min()}));
    bf16Local_.assign(k_.numLocals, 0);
    shared_.clear(), writer_.clear(), reader_.clear();
    for (const SharedArray& a : k_.shared) {
      shared_.emplace_back((size_t)a.count * ir::dtypeSize(a.dtype), (unsigned char)0xFF);
      writer_.emplace_back((size_t)a.count, -1);
      reader_.emplace_back((size_t)a.count, -1);
    }
    open_.assign(threads, {});
    groups_.assign(threads, {});
    bulkOpen_.assign(threads, {});
    bulkGroups_.assign(threads, {});
  }

  void fail(const std::string& what) {
    if (error_.empty()) error_ = what;
  }

  // --- expressions, evaluated for every thread of `m` at once ---

  Lanes eval(const Expr& e, const Mask& m) {
    Lanes r(T_);
    if (!error_.empty()) return r;
    switch (e.kind) {
    case ExprKind::Const:
      for (Val& v : r) {
        if (e.type == Scalar::I64) v.i = e.bits;
        else if (isFloating(e.type)) v.f = rounded(e.type, e.value);
        else v.i = e.value != 0;
      }
      return r;
    case ExprKind::LoopVar:
      for (int t = 0; t < T_; ++t) r[t].i = vars_.at(e.id)[t];
      return r;
    case ExprKind::Local: return locals_.at(e.id);
    case ExprKind::Load: return loadBuffer(e, m);
    case ExprKind::SharedLoad: return loadShared(e, m);
    case ExprKind::WarpReduce: return warpReduce(e, m);
    default: break;
    }
    std::vector<Lanes> a;
    for (const ExprRef& x : e.args) a.push_back(eval(*x, m));
    for (int t = 0; t < T_ && error_.empty(); ++t)
      if (m[t]) r[t] = scalar(e, a, t);
    return r;
  }

  Val scalar(const Expr& e, const std::vector<Lanes>& a, int t) {
    Val v;
    Scalar in = e.args[0]->type;
    switch (e.kind) {
    case ExprKind::Select: return a[0][t].i ? a[1][t] : a[2][t];
    case ExprKind::Cast: return converted(a[0][t], in, e.type);
    case ExprKind::Unary:
      if (isFloating(in)) {
        if (e.op == KOp::IsNan) v.i = std::isnan(a[0][t].f);
        else v.f = rounded(e.type, unaryFloat(e.op, a[0][t].f));
      } else {
        int64_t x = a[0][t].i;
        v.i = e.op == KOp::Neg ? (int64_t)(0 - (uint64_t)x) : e.op == KOp::Abs ? (x < 0 ? -x : x) : in == Scalar::I1 ? !x : ~x;
      }
      return v;
    default: break;
    }
    if (isFloating(in)) {
      double x = a[0][t].f, y = a[1][t].f;
      if (isComparison(e.op)) v.i = compare(e.op, x, y);
      else v.f = rounded(e.type, binaryFloat(e.op, x, y));
      return v;
    }
    v.i = binaryInt(e.op, a[0][t].i, a[1][t].i);
    return v;
  }

  int64_t binaryInt(KOp op, int64_t a, int64_t b) {
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    switch (op) {
    case KOp::Add: return (int64_t)(ua + ub);
    case KOp::Sub: return (int64_t)(ua - ub);
    case KOp::Mul: return (int64_t)(ua * ub);
    case KOp::IDiv: case KOp::Div: case KOp::IMod: case KOp::Rem:
      if (b == 0) return fail("an integer division by zero"), 0;
      return op == KOp::IDiv || op == KOp::Div ? a / b : a % b;
    case KOp::Min: return std::min(a, b);
    case KOp::Max: return std::max(a, b);
    case KOp::Within: return std::min(std::max(a, int64_t(0)), b - 1);
    case KOp::And: return a & b;
    case KOp::Or: return a | b;
    case KOp::Xor: return a ^ b;
    case KOp::Shl: return b < 0 || b > 63 ? 0 : (int64_t)(ua << b);
    case KOp::Shr: return b < 0 || b > 63 ? 0 : (int64_t)(ua >> b);
    case KOp::AShr: return b < 0 || b > 63 ? (a < 0 ? -1 : 0) : a >> b;
    default: return compareInt(op, a, b);
    }
  }

  /// The emitter's conversions between scalar types: float to integer truncates, to i1 is != 0.
  static Val converted(Val v, Scalar from, Scalar to) {
    Val r;
    if (isFloating(from) && isFloating(to)) r.f = rounded(to, v.f);
    else if (isFloating(from)) r.i = to == Scalar::I1 ? !(v.f == 0) : (std::isnan(v.f) ? 0 : (int64_t)v.f);
    else if (isFloating(to)) r.f = rounded(to, (double)v.i);
    else r.i = to == Scalar::I1 ? v.i != 0 : v.i;
    return r;
  }

  bool inside(int64_t index, int64_t count, const std::string& what) {
    if (index >= 0 && index < count) return true;
    fail(what + " at " + std::to_string(index) + ", outside its " + std::to_string(count) + " elements");
    return false;
  }

  unsigned char* element(int buffer, int64_t index, const char* access) {
    const BufferArg& b = k_.buffers.at(buffer);
    if (index < 0 || index >= b.numel) return inside(index, b.numel, std::string(access) + " of %" + b.name), nullptr;
    return (unsigned char*)buffers_[buffer] + index * (int64_t)ir::dtypeSize(b.dtype);
  }

  Lanes loadBuffer(const Expr& e, const Mask& m) {
    Lanes idx = eval(*e.args[0], m), r(T_);
    for (int t = 0; t < T_ && error_.empty(); ++t)
      if (m[t])
        if (const unsigned char* p = element(e.id, idx[t].i, "a load")) r[t] = loadAs(p, k_.buffers[e.id].dtype, e.type);
    return r;
  }

  /// Shared element `index` of array `a` touched by thread t: a race when another thread wrote it
  /// (or, for a write, read it) since the last barrier.
  unsigned char* sharedElement(int a, int64_t index, int t, bool write) {
    if (a < 0 || (size_t)a >= k_.shared.size()) return fail("shared array " + std::to_string(a) + " does not exist"), nullptr;
    if (index < 0 || index >= k_.shared[a].count) return inside(index, k_.shared[a].count, "shared array " + std::to_string(a)), nullptr;
    int32_t& w = writer_[a][index];
    int32_t& rd = reader_[a][index];
    if ((w >= 0 && w != t) || (write && rd != -1 && rd != t)) {
      fail("thread " + std::to_string(t) + (write ? " writes" : " reads") + " element " + std::to_string(index) + " of shared array " +
           std::to_string(a) + ", which thread " + std::to_string(w >= 0 && w != t ? w : rd) + (w >= 0 && w != t ? " wrote" : " read") +
           " with no barrier between");
      return nullptr;
    }
    if (write && bulkReads(a, index)) {
      fail("thread " + std::to_string(t) + " writes element " + std::to_string(index) + " of shared array " + std::to_string(a) +
           ", which a bulk copy not yet waited for reads");
      return nullptr;
    }
    if (write) w = t;
    else rd = rd == -1 || rd == t ? t : -2;
    return shared_[a].data() + index * (int64_t)ir::dtypeSize(k_.shared[a].dtype);
  }

  Lanes loadShared(const Expr& e, const Mask& m) {
    Lanes idx = eval(*e.args[0], m), r(T_);
    for (int t = 0; t < T_ && error_.empty(); ++t)
      if (m[t])
        if (const unsigned char* p = sharedElement(e.id, idx[t].i, t, false)) r[t] = loadAs(p, k_.shared[e.id].dtype, e.type);
    return r;
  }

  /// Whether each warp with a thread in `m` has all 32 there (shfl.sync and mma.sync with a full mask).
  bool wholeWarps(const Mask& m, const char* what) {
    for (int w = 0; w * 32 < T_; ++w) {
      int in = 0;
      for (int l = 0; l < 32 && w * 32 + l < T_; ++l) in += m[w * 32 + l];
      if (in && in != 32) return fail(std::string(what) + " reached by " + std::to_string(in) + " of warp " + std::to_string(w) + "'s 32 lanes"), false;
    }
    return true;
  }

  /// The emitter's butterfly: over each aligned group of `lanes` lanes `stride` apart, every lane
  /// combines its value with the one `offset` lanes away, offset halving down to `stride`.
  Lanes warpReduce(const Expr& e, const Mask& m) {
    Lanes v = eval(*e.args[0], m);
    if (!wholeWarps(m, "a warp reduction")) return v;
    int lanes = (int)e.bits, stride = std::max(1, e.id);
    for (int offset = lanes / 2 * stride; offset >= stride; offset /= 2) {
      Lanes next = v;
      for (int t = 0; t < T_; ++t)
        if (m[t]) next[t].f = rounded(Scalar::F32, binaryFloat(e.op, v[t].f, v[t ^ offset].f));
      v = std::move(next);
    }
    return v;
  }

  // --- statements, run by the threads of `m` ---

  void exec(const Stmt& s, const Mask& m) {
    if (!error_.empty()) return;
    switch (s.kind) {
    case StmtKind::Loop: return loop(s, m);
    case StmtKind::Block:
      for (const StmtRef& b : s.body) exec(*b, m);
      return;
    case StmtKind::Let: case StmtKind::Set: {
      Lanes v = eval(*s.value, m);
      if (s.kind == StmtKind::Let) bf16Local_[s.id] = s.bf16;
      for (int t = 0; t < T_; ++t)
        if (m[t]) locals_[s.id][t] = bf16Local_[s.id] ? Val{ir::fromBF16(ir::toBF16(v[t].f)), 0} : v[t];
      return;
    }
    case StmtKind::Store: case StmtKind::AtomicAdd: return storeBuffer(s, m);
    case StmtKind::SharedStore: return sharedStore(s, m);
    case StmtKind::BulkStore: return bulkStore(s, m);
    case StmtKind::BulkCommit:
      for (int t = 0; t < T_; ++t)
        if (m[t]) bulkGroups_[t].push_back(std::move(bulkOpen_[t])), bulkOpen_[t].clear();
      return;
    case StmtKind::BulkWait: case StmtKind::BulkReadWait: // the shared bytes are read, and written to the buffer, when waited for
      for (int t = 0; t < T_ && error_.empty(); ++t)
        while (m[t] && (int64_t)bulkGroups_[t].size() > s.extent && error_.empty()) {
          for (const BulkCopy& c : bulkGroups_[t].front()) bulkLand(c, t);
          bulkGroups_[t].erase(bulkGroups_[t].begin());
        }
      return;
    case StmtKind::Barrier: return barrier(m);
    case StmtKind::CopyAsync: return copyAsync(s, m);
    case StmtKind::AsyncCommit:
      for (int t = 0; t < T_; ++t)
        if (m[t]) groups_[t].push_back(std::move(open_[t])), open_[t].clear();
      return;
    case StmtKind::AsyncWait:
      for (int t = 0; t < T_ && error_.empty(); ++t)
        while (m[t] && (int64_t)groups_[t].size() > s.extent && error_.empty()) {
          for (const Copy& c : groups_[t].front()) land(c, t);
          groups_[t].erase(groups_[t].begin());
        }
      return;
    case StmtKind::Mma: return mma(s, m);
    case StmtKind::Wgmma: return wgmma(s, m);
    default: return; // wgmma's fences, commits and waits: a product is computed where it is issued
    }
  }

  void loop(const Stmt& s, const Mask& m) {
    if (s.parallel) return fail("a parallel loop inside another statement");
    Lanes bound;
    if (s.value) bound = eval(*s.value, m);
    for (int64_t it = 0; it < s.extent && error_.empty(); ++it) {
      Mask in(T_, 0);
      bool any = false;
      for (int t = 0; t < T_; ++t)
        if (m[t] && (!s.value || it < bound[t].i)) in[t] = 1, any = true, vars_[s.id][t] = it;
      if (!any) return;
      for (const StmtRef& b : s.body) exec(*b, in);
    }
  }

  void storeBuffer(const Stmt& s, const Mask& m) {
    Lanes idx = eval(*s.index, m), v = eval(*s.value, m);
    ir::DType dt = k_.buffers.at(s.id).dtype;
    bool atomic = s.kind == StmtKind::AtomicAdd;
    if (atomic && dt != ir::DType::F32 && dt != ir::DType::F64) return fail("an atomic add into a buffer not of f32 or f64");
    for (int t = 0; t < T_ && error_.empty(); ++t) {
      if (!m[t]) continue;
      unsigned char* p = element(s.id, idx[t].i, atomic ? "an atomic add" : "a store");
      if (!p) return;
      Val x = v[t];
      if (atomic) x.f += loadAs(p, dt, Scalar::F64).f;
      storeAs(p, dt, atomic ? Scalar::F64 : s.value->type, x);
    }
  }

  void barrier(const Mask& m) {
    int in = 0;
    for (char c : m) in += c;
    if (in != T_) return fail("a barrier reached by " + std::to_string(in) + " of the block's " + std::to_string(T_) + " threads");
    for (auto* marks : {&writer_, &reader_})
      for (auto& a : *marks) std::fill(a.begin(), a.end(), -1);
  }

  struct Copy {
    int array, buffer;
    int64_t to, from, bytes;
  };
  struct BulkCopy { ///< out of shared memory: from shared element `from` of `array` to element `to` of `buffer`
    int array, buffer;
    int64_t from, to, bytes;
  };

  void copyAsync(const Stmt& s, const Mask& m) {
    Lanes to = eval(*s.index, m), from = eval(*s.value, m);
    if ((size_t)s.id >= k_.shared.size() || (size_t)s.buffer >= k_.buffers.size()) return fail("a copy between arrays that do not exist");
    int64_t fromSize = (int64_t)ir::dtypeSize(k_.buffers[s.buffer].dtype), toSize = (int64_t)ir::dtypeSize(k_.shared[s.id].dtype);
    for (int t = 0; t < T_ && error_.empty(); ++t) {
      if (!m[t]) continue;
      if ((from[t].i * fromSize) % s.extent || (to[t].i * toSize) % s.extent)
        return fail("a " + std::to_string(s.extent) + "-byte copy from element " + std::to_string(from[t].i) + " to shared element " +
                    std::to_string(to[t].i) + ", not aligned to its size");
      if (!inside(from[t].i, k_.buffers[s.buffer].numel - s.extent / fromSize + 1, "a copy from %" + k_.buffers[s.buffer].name) ||
          !inside(to[t].i, k_.shared[s.id].count - s.extent / toSize + 1, "a copy into shared array " + std::to_string(s.id)))
        return;
      open_[t].push_back(Copy{s.id, s.buffer, to[t].i, from[t].i, s.extent});
    }
  }

  /// shared[index] = value (and shared[index + 1] = the pair's second), rounded to the array's type.
  void sharedStore(const Stmt& s, const Mask& m) {
    Lanes idx = eval(*s.index, m), v = eval(*s.value, m), hi;
    ir::DType dt = k_.shared.at(s.id).dtype;
    bool pair = !s.operands.empty();
    if (pair) hi = eval(*s.operands[0], m);
    if ((dt != ir::DType::F32 && dt != ir::DType::BF16) || (pair && dt != ir::DType::BF16)) return fail("a shared store into an array not of f32 or bf16");
    for (int t = 0; t < T_ && error_.empty(); ++t) {
      if (!m[t]) continue;
      if (pair && idx[t].i % 2) return fail("a shared store of a pair at odd element " + std::to_string(idx[t].i));
      if (unsigned char* p = sharedElement(s.id, idx[t].i, t, true)) storeAs(p, dt, s.value->type, v[t]);
      if (pair)
        if (unsigned char* p = sharedElement(s.id, idx[t].i + 1, t, true)) storeAs(p, dt, s.operands[0]->type, hi[t]);
    }
  }

  /// A bulk copy out of shared memory starts (kir::bulkStore): it reads the shared bytes when it is
  /// waited for (the latest the hardware may), and no thread may write them before that.
  void bulkStore(const Stmt& s, const Mask& m) {
    Lanes from = eval(*s.index, m), to = eval(*s.value, m);
    if ((size_t)s.id >= k_.shared.size() || (size_t)s.buffer >= k_.buffers.size()) return fail("a bulk copy between arrays that do not exist");
    int64_t sharedSize = (int64_t)ir::dtypeSize(k_.shared[s.id].dtype), bufferSize = (int64_t)ir::dtypeSize(k_.buffers[s.buffer].dtype);
    for (int t = 0; t < T_ && error_.empty(); ++t) {
      if (!m[t]) continue;
      if ((from[t].i * sharedSize) % 16 || (to[t].i * bufferSize) % 16)
        return fail("a bulk copy from shared element " + std::to_string(from[t].i) + " to element " + std::to_string(to[t].i) + ", not 16-byte aligned");
      if (!inside(from[t].i, k_.shared[s.id].count - s.extent / sharedSize + 1, "a bulk copy from shared array " + std::to_string(s.id)) ||
          !inside(to[t].i, k_.buffers[s.buffer].numel - s.extent / bufferSize + 1, "a bulk copy into %" + k_.buffers[s.buffer].name))
        return;
      bulkOpen_[t].push_back(BulkCopy{s.id, s.buffer, from[t].i, to[t].i, s.extent});
    }
  }

  /// A bulk copy lands in its buffer: its shared bytes count as read by the waiting thread `t`
  /// (another thread may write them only after a barrier).
  void bulkLand(const BulkCopy& c, int t) {
    int64_t sharedSize = (int64_t)ir::dtypeSize(k_.shared[c.array].dtype), bufferSize = (int64_t)ir::dtypeSize(k_.buffers[c.buffer].dtype);
    auto* to = (unsigned char*)buffers_[c.buffer] + c.to * bufferSize;
    for (int64_t e = 0; e < c.bytes / sharedSize && error_.empty(); ++e)
      if (const unsigned char* p = sharedElement(c.array, c.from + e, t, false)) memcpy(to + e * sharedSize, p, (size_t)sharedSize);
  }

  /// Whether a bulk copy not yet waited for reads element `index` of shared array `a`.
  bool bulkReads(int a, int64_t index) const {
    auto reads = [&](const BulkCopy& c) { return c.array == a && index >= c.from && index < c.from + c.bytes / (int64_t)ir::dtypeSize(k_.shared[a].dtype); };
    for (size_t t = 0; t < bulkOpen_.size(); ++t) {
      if (std::any_of(bulkOpen_[t].begin(), bulkOpen_[t].end(), reads)) return true;
      for (const auto& g : bulkGroups_[t])
        if (std::any_of(g.begin(), g.end(), reads)) return true;
    }
    return false;
  }

  /// A copy lands in shared memory: the waiting thread writes it.
  void land(const Copy& c, int t) {
    int64_t size = (int64_t)ir::dtypeSize(k_.shared[c.array].dtype);
    for (int64_t e = 0; e < c.bytes / size && error_.empty(); ++e)
      if (unsigned char* p = sharedElement(c.array, c.to + e, t, true))
        memcpy(p, (const unsigned char*)buffers_[c.buffer] + c.from * (int64_t)ir::dtypeSize(k_.buffers[c.buffer].dtype) + e * size, size);
  }

  /// mma.m16n8k16 (Kernel.h's mmaBf16): each warp's lanes give their fragments of A, B and C.
  void mma(const Stmt& s, const Mask& m) {
    if (!wholeWarps(m, "a tensor-core product")) return;
    std::vector<Lanes> a, b;
    for (size_t o = 0; o < 8; ++o) a.push_back(eval(*s.operands[o], m));
    for (size_t o = 8; o < 12; ++o) b.push_back(eval(*s.operands[o], m));
    auto bf = [](double x) { return ir::fromBF16(ir::toBF16(x)); };
    for (int w = 0; w * 32 < T_; ++w) {
      if (!m[w * 32]) continue;
      double A[16][16], B[16][8], C[16][8];
      for (int l = 0; l < 32; ++l) {
        int t = w * 32 + l, g = l / 4, q = l % 4;
        for (int h = 0; h < 2; ++h) { // columns +0 and +8
          A[g][2 * q + 8 * h] = bf(a[4 * h][t].f), A[g][2 * q + 1 + 8 * h] = bf(a[4 * h + 1][t].f);
          A[g + 8][2 * q + 8 * h] = bf(a[4 * h + 2][t].f), A[g + 8][2 * q + 1 + 8 * h] = bf(a[4 * h + 3][t].f);
        }
        B[2 * q][g] = bf(b[0][t].f), B[2 * q + 1][g] = bf(b[1][t].f), B[2 * q + 8][g] = bf(b[2][t].f), B[2 * q + 9][g] = bf(b[3][t].f);
        C[g][2 * q] = locals_[s.acc[0]][t].f, C[g][2 * q + 1] = locals_[s.acc[1]][t].f;
        C[g + 8][2 * q] = locals_[s.acc[2]][t].f, C[g + 8][2 * q + 1] = locals_[s.acc[3]][t].f;
      }
      auto d = [&](int r, int c) {
        double sum = C[r][c];
        for (int j = 0; j < 16; ++j) sum += A[r][j] * B[j][c];
        return rounded(Scalar::F32, sum);
      };
      for (int l = 0; l < 32; ++l) {
        int t = w * 32 + l, g = l / 4, q = l % 4;
        locals_[s.acc[0]][t].f = d(g, 2 * q), locals_[s.acc[1]][t].f = d(g, 2 * q + 1);
        locals_[s.acc[2]][t].f = d(g + 8, 2 * q), locals_[s.acc[3]][t].f = d(g + 8, 2 * q + 1);
      }
    }
  }

  /// Element (i, j) of a wgmma tile operand (Kernel.h's WgmmaTile): for a K-major tile row i of
  /// the operand's rows, contracted index j; for an MN-major one contracted row j, column i. The
  /// hardware's view: the descriptor's canonical layout from the tile's start (rows of 128 bytes,
  /// 64-column blocks rows * 128 bytes apart), the 128-byte swizzle applied to the address.
  double tileElement(const WgmmaTile& tile, int64_t start, int64_t i, int64_t j, int t) {
    int64_t plain = tile.mnMajor ? start + (i / 64) * tile.rows * 128 + j * 128 + (i % 64) * 2 : start + i * 128 + j * 2;
    int64_t at = plain ^ (((plain >> 7) & 7) << 4);
    const SharedArray& a = k_.shared.at(tile.array);
    if (a.dtype != ir::DType::BF16 || a.align < 1024) return fail("a wgmma tile outside the 1024-byte aligned bf16 shared arrays"), 0;
    int64_t index = at / 2;
    if (at % 2 || index < 0 || index >= a.count) return inside(index, a.count, "a wgmma tile of shared array " + std::to_string(tile.array)), 0;
    int32_t w = writer_[tile.array][index];
    if (w >= 0) {
      fail("thread " + std::to_string(t) + "'s warpgroup product reads element " + std::to_string(index) + " of shared array " +
           std::to_string(tile.array) + ", which thread " + std::to_string(w) + " wrote with no barrier between");
      return 0;
    }
    return loadAs(shared_[tile.array].data() + at, ir::DType::BF16, Scalar::F32).f;
  }

  /// wgmma.m64nNk16 (Kernel.h's wgmmaBf16) of each warpgroup that reaches it, all 128 threads:
  /// D (64 x n) = A (64 x 16) B (16 x n) (+ D), warp w holding D's rows 16w..16w+15.
  void wgmma(const Stmt& s, const Mask& m) {
    if (!wholeWarps(m, "a warpgroup product")) return;
    int64_t n = 2 * (int64_t)s.acc.size();
    bool aTile = s.tiles.size() > 1;
    std::vector<Lanes> a;
    for (const ExprRef& o : s.operands) a.push_back(eval(*o, m));
    Lanes bStart = eval(*s.tiles[0].offset, m), aStart = aTile ? eval(*s.tiles[1].offset, m) : Lanes();
    auto bf = [](double x) { return ir::fromBF16(ir::toBF16(x)); };
    for (int group = 0; group * 128 < T_ && error_.empty(); ++group) {
      int first = group * 128;
      if (!m[first]) continue;
      for (int l = 1; l < 128; ++l)
        if (!m[first + l] || bStart[first + l].i != bStart[first].i || (aTile && aStart[first + l].i != aStart[first].i))
          return fail("a warpgroup product whose 128 threads do not all reach it with one tile");
      std::vector<double> A(64 * 16), Bm(16 * n);
      for (int64_t r = 0; r < 64; ++r)
        for (int64_t k = 0; k < 16; ++k)
          if (aTile) A[r * 16 + k] = tileElement(s.tiles[1], aStart[first].i, r, k, first);
      if (!aTile)
        for (int l = 0; l < 128; ++l) { // each warp's 16 rows as mma.m16n8k16's A fragments
          int t = first + l, r0 = 16 * (l / 32), g = l % 32 / 4, q = l % 4;
          for (int h = 0; h < 2; ++h) {
            A[(r0 + g) * 16 + 2 * q + 8 * h] = bf(a[4 * h][t].f), A[(r0 + g) * 16 + 2 * q + 1 + 8 * h] = bf(a[4 * h + 1][t].f);
            A[(r0 + g + 8) * 16 + 2 * q + 8 * h] = bf(a[4 * h + 2][t].f), A[(r0 + g + 8) * 16 + 2 * q + 1 + 8 * h] = bf(a[4 * h + 3][t].f);
          }
        }
      for (int64_t k = 0; k < 16; ++k)
        for (int64_t c = 0; c < n; ++c) Bm[k * n + c] = tileElement(s.tiles[0], bStart[first].i, c, k, first);
      if (!error_.empty()) return;
      for (int l = 0; l < 128; ++l) {
        int t = first + l, r0 = 16 * (l / 32), g = l % 32 / 4, q = l % 4;
        for (size_t i = 0; i < s.acc.size(); ++i) { // acc[4j..4j+3]: D[g][8j+2q], D[g][8j+2q+1], D[g+8][8j+2q], D[g+8][8j+2q+1]
          int64_t j = (int64_t)i / 4, row = r0 + g + (i % 4 >= 2 ? 8 : 0), col = 8 * j + 2 * q + (int64_t)(i % 2);
          double sum = s.extent ? locals_[s.acc[i]][t].f : 0;
          for (int64_t k = 0; k < 16; ++k) sum += A[row * 16 + k] * Bm[k * n + col];
          locals_[s.acc[i]][t].f = rounded(Scalar::F32, sum);
        }
      }
    }
  }

  const Kernel& k_;
  const std::vector<void*>& buffers_;
  int T_ = 1;
  std::vector<std::vector<int64_t>> vars_; ///< [loop variable][thread]
  std::vector<Lanes> locals_;              ///< [local][thread]
  std::vector<char> bf16Local_;
  std::vector<std::vector<unsigned char>> shared_;
  std::vector<std::vector<int32_t>> writer_, reader_; ///< per shared element since the last barrier: -1 none, -2 several readers
  std::vector<std::vector<Copy>> open_;               ///< [thread] copies since its last commit
  std::vector<std::vector<std::vector<Copy>>> groups_; ///< [thread] committed groups in flight, oldest first
  std::vector<std::vector<BulkCopy>> bulkOpen_;               ///< [thread] bulk copies since its last bulk commit
  std::vector<std::vector<std::vector<BulkCopy>>> bulkGroups_; ///< [thread] committed, in flight, oldest first
  std::string error_;
};

} // namespace


Error simulateGpu(const Kernel& k, const std::vector<void*>& buffers) { return Simulator(k, buffers).run(); }

} // namespace sgc::kir
