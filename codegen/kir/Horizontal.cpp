// Horizontal kernels: independent kernels of one parallel loop each (elementwise
// ones, reductions) as one GPU launch, each part a grid-stride loop of its own
// (Kernel.h, horizontal).
#include "codegen/kir/Kernel.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <set>
#include <unordered_map>

namespace sgc::kir {
namespace {

/// A part's statements and expressions with its buffers, loop variables and locals renumbered
/// into the horizontal kernel's. Expressions shared within the part stay shared (the emitter
/// computes a shared term once per element).
struct Renumber {
  std::vector<int> buffer;
  int loopBase = 0, localBase = 0, sharedBase = 0;
  std::unordered_map<const Expr*, ExprRef> done;

  ExprRef expr(const ExprRef& e) {
    if (auto it = done.find(e.get()); it != done.end()) return it->second;
    Expr copy = *e;
    if (e->kind == ExprKind::Load) copy.id = buffer.at(e->id);
    if (e->kind == ExprKind::LoopVar) copy.id += loopBase;
    if (e->kind == ExprKind::Local) copy.id += localBase;
    if (e->kind == ExprKind::SharedLoad) copy.id += sharedBase;
    for (ExprRef& a : copy.args) a = expr(a);
    ExprRef out = std::make_shared<const Expr>(std::move(copy));
    done.emplace(e.get(), out);
    return out;
  }

  StmtRef stmt(const Stmt& s) {
    auto out = std::make_shared<Stmt>(s);
    if (s.kind == StmtKind::Loop) out->id += loopBase;
    if (s.kind == StmtKind::Let || s.kind == StmtKind::Set) out->id += localBase;
    if (s.kind == StmtKind::Store || s.kind == StmtKind::AtomicAdd) out->id = buffer.at(s.id);
    if (s.kind == StmtKind::SharedStore) out->id += sharedBase;
    assert(s.kind != StmtKind::CopyAsync && s.kind != StmtKind::BulkStore && s.kind != StmtKind::Mma && s.kind != StmtKind::Wgmma &&
           "no copies or warp products in a horizontal part");
    if (s.index) out->index = expr(s.index);
    if (s.value) out->value = expr(s.value);
    for (ExprRef& o : out->operands) o = expr(o); // a shared store's pair
    for (StmtRef& b : out->body) b = stmt(*b);
    return out;
  }
};

void buffersOf(const Expr& e, std::set<int>& out) {
  if (e.kind == ExprKind::Load) out.insert(e.id);
  for (const ExprRef& a : e.args) buffersOf(*a, out);
}

void buffersOf(const Stmt& s, std::set<int>& out) {
  if (s.kind == StmtKind::Store || s.kind == StmtKind::AtomicAdd) out.insert(s.id);
  for (const ExprRef* e : {&s.index, &s.value})
    if (*e) buffersOf(**e, out);
  for (const StmtRef& b : s.body) buffersOf(*b, out);
}

} // namespace

Kernel horizontal(const std::string& name, const std::vector<HorizontalPart>& parts) {
  Kernel k;
  k.name = name;
  k.gpuOnly = true;
  std::map<std::string, int> byTensor;
  std::vector<StmtRef> loops;
  for (const HorizontalPart& part : parts) {
    const Kernel& p = *part.kernel;
    assert(isHorizontalPart(p) && part.tensors.size() == p.buffers.size() && "a horizontal part is one parallel loop");
    Renumber r;
    r.loopBase = k.numLoopVars, r.localBase = k.numLocals, r.sharedBase = (int)k.shared.size();
    k.shared.insert(k.shared.end(), p.shared.begin(), p.shared.end());
    for (size_t i = 0; i < p.buffers.size(); ++i) {
      auto [it, fresh] = byTensor.try_emplace(part.tensors[i], (int)k.buffers.size());
      if (fresh) k.buffers.push_back({part.tensors[i], p.buffers[i].dtype, p.buffers[i].numel, false});
      k.buffers[it->second].written = k.buffers[it->second].written || p.buffers[i].written;
      r.buffer.push_back(it->second);
    }
    loops.push_back(r.stmt(*p.body));
    k.numLoopVars += p.numLoopVars, k.numLocals += p.numLocals;
  }
  k.body = block(std::move(loops));
  assert(launchExtent(k) <= kMostGridBlocks * k.threads && "each part's blocks within one grid");
  return k;
}

bool isHorizontal(const Kernel& k) {
  if (!k.gpuOnly || k.body->kind != StmtKind::Block || k.body->body.empty()) return false;
  return std::all_of(k.body->body.begin(), k.body->body.end(), [](const StmtRef& s) { return s->kind == StmtKind::Loop && s->parallel; });
}

int loopVectorWidth(const Kernel& k, const Stmt& loop) {
  if (!storesOnly(loop)) return 1;
  std::set<int> used;
  buffersOf(loop, used);
  return streamVectorWidth(k, used, loop.extent);
}

namespace {

/// The GPU blocks parallel loop `loop` of `k` runs on as a part: one thread per vector of its
/// iterations, at most kMostPartBlocks.
int64_t loopBlocks(const Kernel& k, const Stmt& loop) {
  int64_t threads = loop.extent / loopVectorWidth(k, loop);
  return std::clamp<int64_t>((threads + k.threads - 1) / k.threads, 1, kMostPartBlocks);
}

} // namespace

std::vector<int64_t> partBlocks(const Kernel& k) {
  std::vector<int64_t> blocks;
  for (const StmtRef& loop : k.body->body) blocks.push_back(loopBlocks(k, *loop));
  return blocks;
}

int64_t blocksAsPart(const Kernel& part) { return loopBlocks(part, *part.body); }

int64_t launchExtent(const Kernel& k) {
  if (!isHorizontal(k)) return k.body->extent;
  int64_t blocks = 0;
  for (int64_t b : partBlocks(k)) blocks += b;
  return blocks * k.threads;
}

} // namespace sgc::kir
