// Kernel IR constructors and the printer.
#include "codegen/kir/Kernel.h"

#include <algorithm>
#include <cassert>
#include <cstdio>

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
bool isCompare(const std::string& op) { return op == "eq" || op == "lt" || op == "le" || op == "gt" || op == "ge"; }
} // namespace

ExprRef constant(double v, Scalar t) { return make({ExprKind::Const, t, v, t == Scalar::I64 ? (int64_t)v : 0, 0, "", {}}); }
ExprRef constantI64(int64_t v) { return make({ExprKind::Const, Scalar::I64, (double)v, v, 0, "", {}}); }
ExprRef loopVar(int id) { return make({ExprKind::LoopVar, Scalar::I64, 0, 0, id, "", {}}); }
ExprRef local(int id, Scalar t) { return make({ExprKind::Local, t, 0, 0, id, "", {}}); }
ExprRef load(int buffer, ExprRef index, Scalar t) { return make({ExprKind::Load, t, 0, 0, buffer, "", {std::move(index)}}); }

ExprRef unary(const std::string& op, ExprRef a) {
  Scalar t = a->type;
  return make({ExprKind::Unary, t, 0, 0, 0, op, {std::move(a)}});
}

ExprRef binary(const std::string& op, ExprRef a, ExprRef b) {
  assert(a->type == b->type && "binary operands share a type");
  Scalar t = isCompare(op) ? Scalar::I1 : a->type;
  return make({ExprKind::Binary, t, 0, 0, 0, op, {std::move(a), std::move(b)}});
}

ExprRef select(ExprRef c, ExprRef a, ExprRef b) {
  assert(c->type == Scalar::I1 && a->type == b->type && "select takes an i1 and two values of one type");
  Scalar t = a->type;
  return make({ExprKind::Select, t, 0, 0, 0, "", {std::move(c), std::move(a), std::move(b)}});
}

ExprRef cast(ExprRef a, Scalar t) {
  if (a->type == t) return a;
  return make({ExprKind::Cast, t, 0, 0, 0, "", {std::move(a)}});
}

ExprRef warpReduce(const std::string& op, ExprRef a, int lanes, int stride) {
  assert(lanes >= 2 && stride >= 1 && lanes * stride <= 32 && (lanes & (lanes - 1)) == 0 && (stride & (stride - 1)) == 0 &&
         "a warp reduction spans 2, 4, ..., 32 lanes, a power of two apart");
  Scalar t = a->type;
  return make({ExprKind::WarpReduce, t, 0, lanes, stride, op, {std::move(a)}});
}

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

StmtRef set(int id, ExprRef value) {
  return stmtOf(StmtKind::Set, id, 0, false, nullptr, std::move(value), {});
}

StmtRef block(std::vector<StmtRef> body) {
  return stmtOf(StmtKind::Block, 0, 0, false, nullptr, nullptr, std::move(body));
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
  case ExprKind::Unary: return e.op + "(" + exprText(*e.args[0]) + ")";
  case ExprKind::Binary: return e.op + "(" + exprText(*e.args[0]) + ", " + exprText(*e.args[1]) + ")";
  case ExprKind::Select: return "select(" + exprText(*e.args[0]) + ", " + exprText(*e.args[1]) + ", " + exprText(*e.args[2]) + ")";
  case ExprKind::Cast: return std::string(scalarName(e.type)) + "(" + exprText(*e.args[0]) + ")";
  case ExprKind::WarpReduce:
    return "warp_" + e.op + (e.bits == 32 ? "" : std::to_string(e.bits)) + (e.id > 1 ? "x" + std::to_string(e.id) : "") + "(" +
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
  case StmtKind::Let: out += pad + "let t" + std::to_string(s.id) + " = " + exprText(*s.value) + "\n"; return;
  case StmtKind::Set: out += pad + "t" + std::to_string(s.id) + " = " + exprText(*s.value) + "\n"; return;
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

int vectorWidthFor(const Kernel& k) {
  const Stmt* top = k.body.get();
  if (k.gpuOnly || !top || top->kind != StmtKind::Loop || !top->parallel || k.buffers.empty()) return 1;
  for (const auto& s : top->body)
    if (s->kind != StmtKind::Store) return 1;
  size_t narrowest = 8;
  for (const BufferArg& b : k.buffers) narrowest = std::min(narrowest, ir::dtypeSize(b.dtype));
  int width = (int)std::min<size_t>(8, 16 / std::max<size_t>(1, narrowest));
  while (width > 1 && top->extent % width) width /= 2;
  return width;
}

std::string print(const Kernel& k) {
  std::string out = "kernel " + k.name + "(";
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const BufferArg& b = k.buffers[i];
    out += (i ? ", " : "") + std::string(b.written ? "out " : "") + "b" + std::to_string(i) + ": " +
           std::string(ir::dtypeName(b.dtype)) + "[" + std::to_string(b.numel) + "] %" + b.name;
  }
  out += ")\n";
  if (int w = vectorWidthFor(k); w > 1) out += "  // GPU: " + std::to_string(w) + " consecutive iterations per thread\n";
  stmtText(*k.body, 1, out);
  return out;
}

} // namespace sgc::kir
