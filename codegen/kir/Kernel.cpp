// Kernel IR constructors and the printer.
#include "codegen/kir/Kernel.h"

#include <cstring>
#include <unordered_map>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <string_view>

namespace sgc::kir {

Scalar computeType(ir::DType t) {
  if (t == ir::DType::F64) return Scalar::F64;
  if (ir::isFloat(t)) return Scalar::F32;
  if (t == ir::DType::Bool) return Scalar::I1;
  return Scalar::I64;
}

const char* scalarName(Scalar s) {
  static const char* names[] = {"f32", "f64", "i64", "i1"};
  return names[(int)s];
}

namespace {
ExprRef make(Expr e) { return std::make_shared<const Expr>(std::move(e)); }

struct KOpInfo {
  const char* name;
  int arity;
  bool boolResult;
};
constexpr KOpInfo kKOps[] = {
#define KOP(N, Text, Arity, Result) {Text, Arity, std::string_view(#Result) == "Bool"},
#include "codegen/kir/KirOps.def"
};
} // namespace

const char* kopName(KOp op) { return kKOps[(int)op].name; }
int kopArity(KOp op) { return kKOps[(int)op].arity; }

ExprRef constant(double v, Scalar t) { return make({ExprKind::Const, t, v, t == Scalar::I64 ? (int64_t)v : 0, 0, KOp::Add, {}}); }
ExprRef constantI64(int64_t v) { return make({ExprKind::Const, Scalar::I64, (double)v, v, 0, KOp::Add, {}}); }
ExprRef loopVar(int id) { return make({ExprKind::LoopVar, Scalar::I64, 0, 0, id, KOp::Add, {}}); }
ExprRef local(int id, Scalar t) { return make({ExprKind::Local, t, 0, 0, id, KOp::Add, {}}); }
ExprRef load(int buffer, ExprRef index, Scalar t) { return make({ExprKind::Load, t, 0, 0, buffer, KOp::Add, {std::move(index)}}); }

ExprRef sharedLoad(int array, ExprRef index, Scalar t) { return make({ExprKind::SharedLoad, t, 0, 0, array, KOp::Add, {std::move(index)}}); }

ExprRef unary(KOp op, ExprRef a) {
  assert(kopArity(op) == 1 && "a unary KOp");
  Scalar t = kKOps[(int)op].boolResult ? Scalar::I1 : a->type;
  return make({ExprKind::Unary, t, 0, 0, 0, op, {std::move(a)}});
}

ExprRef binary(KOp op, ExprRef a, ExprRef b) {
  assert(kopArity(op) == 2 && a->type == b->type && "a binary KOp of operands of one type");
  Scalar t = kKOps[(int)op].boolResult ? Scalar::I1 : a->type;
  return make({ExprKind::Binary, t, 0, 0, 0, op, {std::move(a), std::move(b)}});
}

ExprRef select(ExprRef c, ExprRef a, ExprRef b) {
  assert(c->type == Scalar::I1 && a->type == b->type && "select takes an i1 and two values of one type");
  Scalar t = a->type;
  return make({ExprKind::Select, t, 0, 0, 0, KOp::Add, {std::move(c), std::move(a), std::move(b)}});
}

ExprRef cast(ExprRef a, Scalar t) {
  if (a->type == t) return a;
  return make({ExprKind::Cast, t, 0, 0, 0, KOp::Add, {std::move(a)}});
}

ExprRef warpReduce(KOp op, ExprRef a, int lanes, int stride) {
  assert(lanes >= 2 && stride >= 1 && lanes * stride <= 32 && (lanes & (lanes - 1)) == 0 && (stride & (stride - 1)) == 0 &&
         "a warp reduction spans 2, 4, ..., 32 lanes, a power of two apart");
  assert((op == KOp::Add || op == KOp::Max) && "warp reductions add or take the maximum");
  Scalar t = a->type;
  return make({ExprKind::WarpReduce, t, 0, lanes, stride, op, {std::move(a)}});
}

ExprRef constantLike(const ExprRef& like, double v) { return constant(v, like->type); }
ExprRef operator+(ExprRef a, ExprRef b) { return binary(KOp::Add, std::move(a), std::move(b)); }
ExprRef operator-(ExprRef a, ExprRef b) { return binary(KOp::Sub, std::move(a), std::move(b)); }
ExprRef operator*(ExprRef a, ExprRef b) { return binary(KOp::Mul, std::move(a), std::move(b)); }
ExprRef operator/(ExprRef a, ExprRef b) { return binary(KOp::Div, std::move(a), std::move(b)); }
ExprRef operator-(ExprRef a) { return unary(KOp::Neg, std::move(a)); }
ExprRef operator+(ExprRef a, double b) { return a + constantLike(a, b); }
ExprRef operator-(ExprRef a, double b) { return a - constantLike(a, b); }
ExprRef operator*(ExprRef a, double b) { return a * constantLike(a, b); }
ExprRef operator/(ExprRef a, double b) { return a / constantLike(a, b); }
ExprRef operator+(double a, ExprRef b) { return constantLike(b, a) + b; }
ExprRef operator-(double a, ExprRef b) { return constantLike(b, a) - b; }
ExprRef operator*(double a, ExprRef b) { return constantLike(b, a) * b; }
ExprRef operator/(double a, ExprRef b) { return constantLike(b, a) / b; }
ExprRef exp(ExprRef x) { return unary(KOp::Exp, std::move(x)); }
ExprRef exp2(ExprRef x) { return unary(KOp::Exp2, std::move(x)); }
ExprRef expm1(ExprRef x) { return unary(KOp::Expm1, std::move(x)); }
ExprRef log(ExprRef x) { return unary(KOp::Log, std::move(x)); }
ExprRef log1p(ExprRef x) { return unary(KOp::Log1p, std::move(x)); }
ExprRef sqrt(ExprRef x) { return unary(KOp::Sqrt, std::move(x)); }
ExprRef tanh(ExprRef x) { return unary(KOp::Tanh, std::move(x)); }
ExprRef erf(ExprRef x) { return unary(KOp::Erf, std::move(x)); }
ExprRef sin(ExprRef x) { return unary(KOp::Sin, std::move(x)); }
ExprRef cos(ExprRef x) { return unary(KOp::Cos, std::move(x)); }
ExprRef atan(ExprRef x) { return unary(KOp::Atan, std::move(x)); }
ExprRef abs(ExprRef x) { return unary(KOp::Abs, std::move(x)); }
ExprRef floor(ExprRef x) { return unary(KOp::Floor, std::move(x)); }
ExprRef ceil(ExprRef x) { return unary(KOp::Ceil, std::move(x)); }
ExprRef min(ExprRef a, ExprRef b) { return binary(KOp::Min, std::move(a), std::move(b)); }
ExprRef max(ExprRef a, ExprRef b) { return binary(KOp::Max, std::move(a), std::move(b)); }
ExprRef min(ExprRef a, double b) { return min(a, constantLike(a, b)); }
ExprRef max(ExprRef a, double b) { return max(a, constantLike(a, b)); }
ExprRef pow(ExprRef a, ExprRef b) { return binary(KOp::Pow, std::move(a), std::move(b)); }
ExprRef eq(ExprRef a, ExprRef b) { return binary(KOp::Eq, std::move(a), std::move(b)); }
ExprRef ne(ExprRef a, ExprRef b) { return binary(KOp::Ne, std::move(a), std::move(b)); }
ExprRef lt(ExprRef a, ExprRef b) { return binary(KOp::Lt, std::move(a), std::move(b)); }
ExprRef le(ExprRef a, ExprRef b) { return binary(KOp::Le, std::move(a), std::move(b)); }
ExprRef gt(ExprRef a, ExprRef b) { return binary(KOp::Gt, std::move(a), std::move(b)); }
ExprRef ge(ExprRef a, ExprRef b) { return binary(KOp::Ge, std::move(a), std::move(b)); }
ExprRef eq(ExprRef a, double b) { return eq(a, constantLike(a, b)); }
ExprRef lt(ExprRef a, double b) { return lt(a, constantLike(a, b)); }
ExprRef le(ExprRef a, double b) { return le(a, constantLike(a, b)); }
ExprRef gt(ExprRef a, double b) { return gt(a, constantLike(a, b)); }
ExprRef ge(ExprRef a, double b) { return ge(a, constantLike(a, b)); }

namespace {
StmtRef stmtOf(StmtKind kind, int id, int64_t extent, bool parallel, ExprRef index, ExprRef value, std::vector<StmtRef> body) {
  auto s = std::make_shared<Stmt>();
  s->kind = kind, s->id = id, s->extent = extent, s->parallel = parallel;
  s->index = std::move(index), s->value = std::move(value), s->body = std::move(body);
  return s;
}
} // namespace

StmtRef loop(int var, int64_t extent, bool parallel, std::vector<StmtRef> body) {
  return stmtOf(StmtKind::Loop, var, extent, parallel, nullptr, nullptr, std::move(body));
}

StmtRef loopUpTo(int var, int64_t extent, ExprRef bound, std::vector<StmtRef> body) {
  StmtRef s = loop(var, extent, false, std::move(body));
  s->value = std::move(bound);
  return s;
}

StmtRef store(int buffer, ExprRef index, ExprRef value) {
  return stmtOf(StmtKind::Store, buffer, 0, false, std::move(index), std::move(value), {});
}

StmtRef atomicAdd(int buffer, ExprRef index, ExprRef value) {
  StmtRef s = store(buffer, std::move(index), std::move(value));
  s->kind = StmtKind::AtomicAdd;
  return s;
}

StmtRef let(int id, ExprRef value) {
  return stmtOf(StmtKind::Let, id, 0, false, nullptr, std::move(value), {});
}

StmtRef letBf16(int id, ExprRef value) {
  assert(value->type == Scalar::F32 && "bf16 locals hold f32 values");
  StmtRef s = let(id, std::move(value));
  s->bf16 = true;
  return s;
}

StmtRef set(int id, ExprRef value) {
  return stmtOf(StmtKind::Set, id, 0, false, nullptr, std::move(value), {});
}

StmtRef block(std::vector<StmtRef> body) {
  return stmtOf(StmtKind::Block, 0, 0, false, nullptr, nullptr, std::move(body));
}

StmtRef copyAsync(int array, ExprRef sharedIndex, int buffer, ExprRef index, int bytes) {
  assert(sharedIndex->type == Scalar::I64 && index->type == Scalar::I64 && "copies take i64 indices");
  assert((bytes == 4 || bytes == 8 || bytes == 16) && "cp.async copies 4, 8 or 16 bytes");
  StmtRef s = stmtOf(StmtKind::CopyAsync, array, bytes, false, std::move(sharedIndex), std::move(index), {});
  s->buffer = buffer;
  return s;
}

StmtRef asyncCommit() { return stmtOf(StmtKind::AsyncCommit, 0, 0, false, nullptr, nullptr, {}); }

StmtRef asyncWait(int inFlight) { return stmtOf(StmtKind::AsyncWait, 0, inFlight, false, nullptr, nullptr, {}); }

StmtRef barrier() { return stmtOf(StmtKind::Barrier, 0, 0, false, nullptr, nullptr, {}); }

StmtRef sharedStore(int array, ExprRef index, ExprRef value) {
  assert(index->type == Scalar::I64 && "shared stores take an i64 index");
  return stmtOf(StmtKind::SharedStore, array, 0, false, std::move(index), std::move(value), {});
}

StmtRef sharedStorePair(int array, ExprRef index, ExprRef lo, ExprRef hi) {
  StmtRef s = sharedStore(array, std::move(index), std::move(lo));
  s->operands.push_back(std::move(hi));
  return s;
}

StmtRef mmaBf16(std::vector<int> acc, std::vector<ExprRef> a, std::vector<ExprRef> b) {
  assert(acc.size() == 4 && a.size() == 8 && b.size() == 4 && "mma.m16n8k16 takes 4 accumulators, 8 + 4 operands");
  auto s = std::make_shared<Stmt>();
  s->kind = StmtKind::Mma;
  s->operands = std::move(a);
  s->operands.insert(s->operands.end(), b.begin(), b.end());
  s->acc = std::move(acc);
  return s;
}

ExprRef wgmmaTileOffset(const ExprRef& row, const ExprRef& col, int64_t rows) {
  auto i = [](int64_t v) { return constantI64(v); };
  ExprRef chunk = binary(KOp::Xor, binary(KOp::And, binary(KOp::Shr, col, i(3)), i(7)), binary(KOp::And, row, i(7)));
  return binary(KOp::Shr, col, i(6)) * i(rows * 128) + row * i(128) + chunk * i(16) + binary(KOp::And, col, i(7)) * i(2);
}

namespace {
StmtRef wgmmaOf(std::vector<int> acc, std::vector<ExprRef> a, std::vector<WgmmaTile> tiles, bool accumulate) {
  assert(!acc.empty() && acc.size() % 4 == 0 && acc.size() <= 128 && "wgmma's n is a multiple of 8 up to 256");
  assert((a.empty() || a.size() == 8) && "a warp's A fragment of wgmma is mma.m16n8k16's: 8 elements");
  assert(std::all_of(tiles.begin(), tiles.end(), [](const WgmmaTile& t) { return t.offset && t.offset->type == Scalar::I64 && t.rows % 8 == 0; }) &&
         "wgmma tiles: i64 offsets, rows of 8");
  auto s = std::make_shared<Stmt>();
  s->kind = StmtKind::Wgmma;
  s->acc = std::move(acc), s->operands = std::move(a), s->tiles = std::move(tiles), s->extent = accumulate;
  return s;
}
} // namespace

StmtRef wgmmaBf16(std::vector<int> acc, std::vector<ExprRef> a, WgmmaTile b, bool accumulate) {
  return wgmmaOf(std::move(acc), std::move(a), {std::move(b)}, accumulate);
}

StmtRef wgmmaBf16(std::vector<int> acc, WgmmaTile a, WgmmaTile b, bool accumulate) {
  return wgmmaOf(std::move(acc), {}, {std::move(b), std::move(a)}, accumulate);
}

StmtRef wgmmaFence() { return stmtOf(StmtKind::WgmmaFence, 0, 0, false, nullptr, nullptr, {}); }
StmtRef wgmmaCommit() { return stmtOf(StmtKind::WgmmaCommit, 0, 0, false, nullptr, nullptr, {}); }
StmtRef fenceProxyAsync() { return stmtOf(StmtKind::FenceProxyAsync, 0, 0, false, nullptr, nullptr, {}); }

StmtRef bulkStore(int array, ExprRef sharedIndex, int buffer, ExprRef index, int64_t bytes) {
  assert(sharedIndex->type == Scalar::I64 && index->type == Scalar::I64 && "bulk copies take i64 indices");
  assert(bytes > 0 && bytes % 16 == 0 && "cp.async.bulk copies a multiple of 16 bytes");
  StmtRef s = stmtOf(StmtKind::BulkStore, array, bytes, false, std::move(sharedIndex), std::move(index), {});
  s->buffer = buffer;
  return s;
}

StmtRef bulkCommit() { return stmtOf(StmtKind::BulkCommit, 0, 0, false, nullptr, nullptr, {}); }

StmtRef bulkWait(int inFlight) { return stmtOf(StmtKind::BulkWait, 0, inFlight, false, nullptr, nullptr, {}); }

StmtRef bulkReadWait(int inFlight) { return stmtOf(StmtKind::BulkReadWait, 0, inFlight, false, nullptr, nullptr, {}); }

StmtRef wgmmaWait(int inFlight, std::vector<int> acc) {
  StmtRef s = stmtOf(StmtKind::WgmmaWait, 0, inFlight, false, nullptr, nullptr, {});
  s->acc = std::move(acc);
  return s;
}

namespace {

std::string exprText(const Expr& e) {
  char buf[64];
  switch (e.kind) {
  case ExprKind::Const:
    if (e.type == Scalar::I64) return std::to_string(e.bits);
    snprintf(buf, sizeof buf, "%.9g", e.value);
    return buf;
  case ExprKind::LoopVar: return "i" + std::to_string(e.id);
  case ExprKind::Local: return "t" + std::to_string(e.id);
  case ExprKind::Load: return "b" + std::to_string(e.id) + "[" + exprText(*e.args[0]) + "]";
  case ExprKind::SharedLoad: return "s" + std::to_string(e.id) + "[" + exprText(*e.args[0]) + "]";
  case ExprKind::Unary: return std::string(kopName(e.op)) + "(" + exprText(*e.args[0]) + ")";
  case ExprKind::Binary: return std::string(kopName(e.op)) + "(" + exprText(*e.args[0]) + ", " + exprText(*e.args[1]) + ")";
  case ExprKind::Select: return "select(" + exprText(*e.args[0]) + ", " + exprText(*e.args[1]) + ", " + exprText(*e.args[2]) + ")";
  case ExprKind::Cast: return std::string(scalarName(e.type)) + "(" + exprText(*e.args[0]) + ")";
  case ExprKind::WarpReduce:
    return "warp_" + std::string(kopName(e.op)) + (e.bits == 32 ? "" : std::to_string(e.bits)) + (e.id > 1 ? "x" + std::to_string(e.id) : "") + "(" +
           exprText(*e.args[0]) + ")";
  }
  return "?";
}

void stmtText(const Stmt& s, int depth, std::string& out) {
  std::string pad(2 * depth, ' ');
  switch (s.kind) {
  case StmtKind::Loop:
    out += pad + (s.parallel ? "parallel for i" : "for i") + std::to_string(s.id) + " < " +
           (s.value ? "min(" + std::to_string(s.extent) + ", " + exprText(*s.value) + ")" : std::to_string(s.extent)) + ":\n";
    for (auto& b : s.body) stmtText(*b, depth + 1, out);
    return;
  case StmtKind::Block:
    for (auto& b : s.body) stmtText(*b, depth, out);
    return;
  case StmtKind::Store: out += pad + "b" + std::to_string(s.id) + "[" + exprText(*s.index) + "] = " + exprText(*s.value) + "\n"; return;
  case StmtKind::AtomicAdd: out += pad + "b" + std::to_string(s.id) + "[" + exprText(*s.index) + "] += " + exprText(*s.value) + " (atomic)\n"; return;
  case StmtKind::Let: out += pad + "let t" + std::to_string(s.id) + (s.bf16 ? ": bf16" : "") + " = " + exprText(*s.value) + "\n"; return;
  case StmtKind::Set: out += pad + "t" + std::to_string(s.id) + " = " + exprText(*s.value) + "\n"; return;
  case StmtKind::CopyAsync:
    out += pad + "s" + std::to_string(s.id) + "[" + exprText(*s.index) + "...] = b" + std::to_string(s.buffer) + "[" + exprText(*s.value) +
           "...] (" + std::to_string(s.extent) + " bytes, async)\n";
    return;
  case StmtKind::AsyncCommit: out += pad + "async_commit\n"; return;
  case StmtKind::AsyncWait: out += pad + "async_wait(" + std::to_string(s.extent) + ")\n"; return;
  case StmtKind::Barrier: out += pad + "barrier\n"; return;
  case StmtKind::SharedStore:
    out += pad + "s" + std::to_string(s.id) + "[" + exprText(*s.index) + (s.operands.empty() ? "] = " : "..+1] = ") + exprText(*s.value) +
           (s.operands.empty() ? "" : ", " + exprText(*s.operands[0])) + "\n";
    return;
  case StmtKind::BulkStore:
    out += pad + "b" + std::to_string(s.buffer) + "[" + exprText(*s.value) + "...] = s" + std::to_string(s.id) + "[" + exprText(*s.index) +
           "...] (" + std::to_string(s.extent) + " bytes, bulk)\n";
    return;
  case StmtKind::BulkCommit: out += pad + "bulk_commit\n"; return;
  case StmtKind::BulkWait: out += pad + "bulk_wait(" + std::to_string(s.extent) + ")\n"; return;
  case StmtKind::BulkReadWait: out += pad + "bulk_read_wait(" + std::to_string(s.extent) + ")\n"; return;
  case StmtKind::Wgmma: {
    auto tile = [](const WgmmaTile& t) {
      return "s" + std::to_string(t.array) + "@" + exprText(*t.offset) + (t.mnMajor ? " mn-major" : " k-major") + " rows " + std::to_string(t.rows);
    };
    std::string a = s.tiles.size() > 1 ? tile(s.tiles[1]) : "";
    for (size_t i = 0; i < s.operands.size(); ++i) a += (i ? ", " : "") + exprText(*s.operands[i]);
    out += pad + "(t" + std::to_string(s.acc[0]) + "..t" + std::to_string(s.acc.back()) + (s.extent ? ") += " : ") = ") + "wgmma_bf16 m64n" + std::to_string(2 * s.acc.size()) +
           "k16([" + a + "], [" + tile(s.tiles[0]) + "])\n";
    return;
  }
  case StmtKind::WgmmaFence: out += pad + "wgmma_fence\n"; return;
  case StmtKind::WgmmaCommit: out += pad + "wgmma_commit\n"; return;
  case StmtKind::WgmmaWait: out += pad + "wgmma_wait(" + std::to_string(s.extent) + ")\n"; return;
  case StmtKind::FenceProxyAsync: out += pad + "fence_proxy_async\n"; return;
  case StmtKind::Mma: {
    std::string acc, a, b;
    for (size_t i = 0; i < 4; ++i) acc += (i ? ", t" : "t") + std::to_string(s.acc[i]);
    for (size_t i = 0; i < 12; ++i) (i < 8 ? a : b) += (i % 8 ? ", " : "") + exprText(*s.operands[i]);
    out += pad + "(" + acc + ") += mma_bf16([" + a + "], [" + b + "])\n";
    return;
  }
  }
}

} // namespace

namespace {
bool hasWgmma(const Stmt& s) {
  return s.kind == StmtKind::Wgmma || std::any_of(s.body.begin(), s.body.end(), [](const StmtRef& b) { return hasWgmma(*b); });
}
} // namespace

bool hasWgmma(const Kernel& k) { return k.body && hasWgmma(*k.body); }

std::vector<int64_t> sharedOffsets(const Kernel& k) {
  std::vector<int64_t> at;
  int64_t bytes = 0;
  for (const SharedArray& a : k.shared) {
    bytes = (bytes + a.align - 1) / a.align * a.align;
    at.push_back(bytes);
    bytes += a.count * (int64_t)ir::dtypeSize(a.dtype);
  }
  return at;
}

int64_t sharedBytes(const Kernel& k) {
  if (k.shared.empty()) return 0;
  return sharedOffsets(k).back() + k.shared.back().count * (int64_t)ir::dtypeSize(k.shared.back().dtype);
}

int64_t dynamicSharedBytes(const Kernel& k) {
  int64_t bytes = sharedBytes(k), align = 16;
  if (bytes <= kMostStaticShared) return 0;
  for (const SharedArray& a : k.shared) align = std::max(align, a.align);
  return bytes + align - 16;
}

bool storesOnly(const Stmt& loop) {
  return std::all_of(loop.body.begin(), loop.body.end(), [](const StmtRef& s) { return s->kind == StmtKind::Store; });
}

namespace {

bool anyExpr(const Expr& e, bool (*pred)(const Expr&)) {
  return pred(e) || std::any_of(e.args.begin(), e.args.end(), [&](const ExprRef& a) { return anyExpr(*a, pred); });
}

/// Whether a statement in `s` (itself, its body's, nested) satisfies `stmt`, or an expression in
/// one (index, value, operands, nested) satisfies `expr`.
bool anyIn(const Stmt& s, bool (*stmt)(const Stmt&), bool (*expr)(const Expr&)) {
  if (stmt(s)) return true;
  for (const ExprRef* e : {&s.index, &s.value})
    if (*e && anyExpr(**e, expr)) return true;
  if (std::any_of(s.operands.begin(), s.operands.end(), [&](const ExprRef& e) { return anyExpr(*e, expr); })) return true;
  return std::any_of(s.body.begin(), s.body.end(), [&](const StmtRef& b) { return anyIn(*b, stmt, expr); });
}

} // namespace

bool hasWarpOps(const Stmt& s) {
  return anyIn(
      s, [](const Stmt& st) { return st.kind == StmtKind::Mma || st.kind == StmtKind::Wgmma; },
      [](const Expr& e) { return e.kind == ExprKind::WarpReduce; });
}

bool hasBlockOps(const Stmt& s) {
  return anyIn(
      s,
      [](const Stmt& st) {
        return st.kind == StmtKind::CopyAsync || st.kind == StmtKind::AsyncCommit || st.kind == StmtKind::AsyncWait ||
               st.kind == StmtKind::Barrier || st.kind == StmtKind::SharedStore || st.kind == StmtKind::BulkStore ||
               st.kind == StmtKind::BulkCommit || st.kind == StmtKind::BulkWait || st.kind == StmtKind::BulkReadWait;
      },
      [](const Expr& e) { return e.kind == ExprKind::SharedLoad; });
}

bool isHorizontalPart(const Kernel& k) {
  if (!k.body || k.body->kind != StmtKind::Loop || !k.body->parallel || k.threads != Kernel{}.threads || k.minBlocks != 0) return false;
  if (!k.gpuOnly) return k.shared.empty();
  return !k.shared.empty() && k.body->extent % k.threads == 0 && !hasWarpOps(*k.body); // whole blocks through shared memory
}

bool isElementwisePart(const Kernel& k) { return isHorizontalPart(k) && storesOnly(*k.body); }

bool isZeroing(const Kernel& k) {
  if (!isElementwisePart(k) || k.buffers.size() != 1 || k.body->body.size() != 1) return false;
  const Stmt& st = *k.body->body[0];
  const Expr &at = *st.index, &v = *st.value;
  return at.kind == ExprKind::LoopVar && at.id == k.body->id && k.body->extent == k.buffers[0].numel && v.kind == ExprKind::Const &&
         v.value == 0 && !std::signbit(v.value) && v.bits == 0;
}

int widestVector(size_t elementBytes) { return (int)std::min<size_t>(8, 16 / std::max<size_t>(1, elementBytes)); }

int storeVectorWidth(size_t elementBytes, int64_t extent) {
  int width = widestVector(elementBytes);
  while (width > 1 && extent % width) width /= 2;
  return width;
}

int streamVectorWidth(const Kernel& k, const std::set<int>& buffers, int64_t extent) {
  size_t widest = 1;
  for (int b : buffers)
    if (k.buffers[b].numel >= extent) widest = std::max(widest, ir::dtypeSize(k.buffers[b].dtype));
  return storeVectorWidth(widest, extent);
}

int vectorWidthFor(const Kernel& k) {
  const Stmt* top = k.body.get();
  if (k.gpuOnly || !top || top->kind != StmtKind::Loop || !top->parallel || k.buffers.empty() || !storesOnly(*top)) return 1;
  std::set<int> all;
  for (int b = 0; b < (int)k.buffers.size(); ++b) all.insert(b);
  return streamVectorWidth(k, all, top->extent);
}

namespace {

/// The key's writer: each expression node in full the first time, then as "#n" (its order of
/// first visit), so that a subexpression used twice at every level does not double the key.
struct KeyWriter {
  std::string out;
  std::unordered_map<const Expr*, size_t> seen;

  void expr(const Expr& e) {
    auto [it, fresh] = seen.emplace(&e, seen.size());
    if (!fresh) {
      out += "#" + std::to_string(it->second);
      return;
    }
    uint64_t value;
    std::memcpy(&value, &e.value, sizeof value);
    out += "(" + std::to_string((int)e.kind) + " " + std::to_string((int)e.type) + " " + std::to_string(value) + " " +
           std::to_string(e.bits) + " " + std::to_string(e.id) + " " + std::to_string((int)e.op);
    for (const ExprRef& a : e.args) expr(*a);
    out += ")";
  }

  void stmt(const Stmt& s) {
    out += "[" + std::to_string((int)s.kind) + " " + std::to_string(s.id) + " " + std::to_string(s.buffer) + " " + std::to_string(s.extent) +
           " " + std::to_string(s.parallel) + " " + std::to_string(s.bf16);
    for (const ExprRef* e : {&s.index, &s.value}) {
      out += *e ? "" : " -";
      if (*e) expr(**e);
    }
    for (const StmtRef& b : s.body) stmt(*b);
    out += " |";
    for (const ExprRef& o : s.operands) expr(*o);
    for (int a : s.acc) out += " " + std::to_string(a);
    for (const WgmmaTile& t : s.tiles) {
      out += " {" + std::to_string(t.array) + " " + std::to_string(t.rows) + " " + std::to_string(t.mnMajor);
      expr(*t.offset);
      out += "}";
    }
    out += "]";
  }
};

} // namespace

std::string contentKey(const Kernel& k) {
  std::string out;
  for (const BufferArg& b : k.buffers)
    out += std::to_string((int)b.dtype) + ":" + std::to_string(b.numel) + (b.written ? "w " : "r ");
  out += std::to_string(k.numLoopVars) + " " + std::to_string(k.numLocals) + " " + std::to_string(k.gpuOnly) + " " +
         std::to_string(k.threads) + " " + std::to_string(k.minBlocks) + "\n";
  for (const SharedArray& a : k.shared)
    out += "shared " + std::to_string((int)a.dtype) + ":" + std::to_string(a.count) + " align " + std::to_string(a.align) + "\n";
  KeyWriter w;
  w.stmt(*k.body);
  return out + w.out;
}

std::string print(const Kernel& k) {
  std::string out = "kernel " + k.name + "(";
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const BufferArg& b = k.buffers[i];
    out += (i ? ", " : "") + std::string(b.written ? "out " : "") + "b" + std::to_string(i) + ": " +
           std::string(ir::dtypeName(b.dtype)) + "[" + std::to_string(b.numel) + "] %" + b.name;
  }
  out += ")\n";
  for (size_t i = 0; i < k.shared.size(); ++i)
    out += "  shared s" + std::to_string(i) + ": " + std::string(ir::dtypeName(k.shared[i].dtype)) + "[" + std::to_string(k.shared[i].count) + "]" +
           (k.shared[i].align != 16 ? " align " + std::to_string(k.shared[i].align) : "") + "\n";
  if (int w = vectorWidthFor(k); w > 1) out += "  // GPU: " + std::to_string(w) + " consecutive iterations per thread\n";
  stmtText(*k.body, 1, out);
  return out;
}

} // namespace sgc::kir
