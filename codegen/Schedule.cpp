// The kernel schedule (see Program.h's kernelSchedule): products with their epilogues,
// elementwise nodes fused across the graph, row ops with the groups around them, and groups
// sunk into their readers.
#include "codegen/Program.h"
#include "codegen/Schedule.h"

#include "codegen/kir/Lower.h"
#include "codegen/kir/LowerOps.h"

#include <optional>

namespace sgc::codegen {
namespace {

bool allElementwise(const Group& g) {
  return std::all_of(g.begin(), g.end(), [](const ir::Node* n) { return kir::isFusibleElementwise(*n); });
}

bool allFusible(const Group& g) {
  return std::all_of(g.begin(), g.end(), [](const ir::Node* n) { return kir::isFusible(*n); });
}



/// The most groups back that a row op's prologue looks for the elementwise groups feeding it.
constexpr size_t kMaxFeederDistance = 16;

/// Elementwise groups before out[k] (k: where the prologue `merged` was) whose values only the
/// prologue (or the row op) reads join it in front, latest first: a sum of three gradients (a
/// Llama's q, k and v projections' dx) that an add computes in two steps, the first as soon as its
/// operands are ready, is then read and added where the row op reads it, not stored between.
/// Moving such a group later is safe: nothing reads its values before the prologue, whose place
/// follows its operands'.
void takeFeeders(std::vector<Group>& out, size_t k, Group& merged, const ir::Node* row, Readers& readers) {
  for (size_t j = k; j-- > 0 && k - j <= kMaxFeederDistance;) {
    const Group& pre = out[j];
    if (!allElementwise(pre) || hasRefresh(pre) || pre.back()->outputs[0]->type.shape() != row->input(0)->type.shape()) continue;
    Group inside(pre);
    inside.insert(inside.end(), merged.begin(), merged.end());
    inside.push_back(row);
    bool feeds = std::any_of(merged.begin(), merged.end(), [&](const ir::Node* n) {
      return std::count(n->inputs.begin(), n->inputs.end(), pre.back()->outputs[0]) > 0;
    });
    if (!feeds || std::any_of(pre.begin(), pre.end(), [&](const ir::Node* n) { return readers.outside(n->outputs[0], inside); })) continue;
    merged.insert(merged.begin(), pre.begin(), pre.end());
    out.erase(out.begin() + (std::ptrdiff_t)j);
  }
}

/// A row-wise op (kir::isRowOp) takes in an earlier elementwise group that computes one of its
/// operands when nothing else reads the group's values (the group moves to the row op), or, for
/// a normalization (kir::storesPrologue), nothing else but its result, which the row op's GPU form then stores as
/// it reads it (a transformer's residual sum, read again by the next sum and the backward), and the
/// elementwise groups right after it while each starts from the result of the one before (the
/// first from the row op's): a GPU runs them all as one kernel (kir::lowerRowGroupGpu), a CPU as
/// the same kernels as before, and the memory plan sees one step. A column sum (a bias gradient)
/// takes no epilogue, and moves up to its prologue instead (the GELU gradient, whose other readers,
/// the products, come between): its one other operand is a constant.
std::vector<Group> mergeRowGroups(std::vector<Group> groups, Readers& readers) {
  std::vector<Group> out;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (groups[i].size() != 1 || !kir::isRowOp(*groups[i][0])) {
      out.push_back(std::move(groups[i]));
      continue;
    }
    const ir::Node* row = groups[i][0];
    const ir::Value* y = row->outputs[0];
    Group merged;
    size_t at = SIZE_MAX; // a column sum moves up to its prologue when its other operands are no node's results
    for (size_t k = out.size(); k-- > 0;) {
      const Group& pre = out[k];
      const ir::Value* v = pre.back()->outputs[0];
      if (!allElementwise(pre) || hasRefresh(pre) || !std::count(row->inputs.begin(), row->inputs.end(), v) || v->type.shape() != row->input(0)->type.shape())
        continue;
      Group inside(pre);
      inside.push_back(row);
      bool storable = kir::storesPrologue(*row); // may store the prologue's result
      if (std::none_of(pre.begin(), pre.end(), [&](const ir::Node* n) { return (!storable || n != pre.back()) && readers.outside(n->outputs[0], inside); })) {
        bool ready = std::all_of(row->inputs.begin(), row->inputs.end(), [&](const ir::Value* in) { // at the prologue's place
          return !in || in == v || in->kind != ir::ValueKind::Result;
        });
        bool up = !kir::takesEpilogue(*row) && ready;
        bool readBetween = std::any_of(out.begin() + (std::ptrdiff_t)k + 1, out.end(), [&](const Group& between) { // the prologue cannot move down past them
          return std::any_of(between.begin(), between.end(), [&](const ir::Node* n) { return std::count(n->inputs.begin(), n->inputs.end(), v) > 0; });
        });
        if (up || !readBetween) {
          merged = std::move(out[k]);
          out.erase(out.begin() + (std::ptrdiff_t)k);
          if (up) at = k;
          else
            takeFeeders(out, k, merged, row, readers);
        }
      }
      break;
    }
    merged.push_back(row);
    if (at != SIZE_MAX) {
      out.insert(out.begin() + (std::ptrdiff_t)at, std::move(merged));
      continue;
    }
    const ir::Value* last = y;
    while (kir::takesEpilogue(*row) && i + 1 < groups.size() && allElementwise(groups[i + 1]) &&
           groups[i + 1][0]->outputs[0]->type.shape() == y->type.shape() && std::count(groups[i + 1][0]->inputs.begin(), groups[i + 1][0]->inputs.end(), last)) {
      merged.insert(merged.end(), groups[i + 1].begin(), groups[i + 1].end());
      last = merged.back()->outputs[0];
      ++i;
    }
    out.push_back(std::move(merged));
  }
  return out;
}

} // namespace

/// The most nodes one fused kernel takes: far above what models fuse (tens), it bounds the work
/// per group, so that scheduling a long chain of elementwise ops stays linear in its length.
constexpr size_t kMaxFused = 256;

namespace {

/// A product and the elementwise nodes right after it that its epilogue computes: those of its
/// result's shape and dtype that read what the run computes, up to the longest prefix whose
/// values, but the last, are read only inside it (the epilogue stores one result).
Group productRun(const std::vector<const ir::Node*>& nodes, size_t i, Readers& readers) {
  const ir::Value* hv = nodes[i]->outputs[0];
  std::vector<const ir::Node*> run{nodes[i]};
  std::set<const ir::Value*> produced{hv};
  for (size_t j = i + 1; j < nodes.size() && run.size() < kMaxFused; ++j) {
    const ir::Node* n = nodes[j];
    bool reads = std::any_of(n->inputs.begin(), n->inputs.end(), [&](const ir::Value* v) { return produced.count(v); });
    if (!kir::isFusibleElementwise(*n) || !reads || n->outputs[0]->type.shape() != hv->type.shape() || n->outputs[0]->type.dtype != hv->type.dtype)
      break;
    run.push_back(n);
    produced.insert(n->outputs[0]);
  }
  // run[0..k] is one when every value run[m] (m < k) has its last reader at a position <= k of
  // the run (a value read outside the run, or outliving the step, never does). Linear in the
  // run's readers.
  std::map<const ir::Node*, size_t> position;
  for (size_t k = 0; k < run.size(); ++k) position[run[k]] = k;
  size_t best = 0, lastReader = 0; // of the values run[0..k-1]
  for (size_t k = 1; k < run.size(); ++k) {
    const ir::Value* v = run[k - 1]->outputs[0];
    size_t last = readers.escaping.count(v) ? SIZE_MAX : 0;
    for (const ir::Node* c : readers.of[v]) {
      auto at = position.find(c);
      last = std::max(last, at == position.end() ? SIZE_MAX : at->second);
    }
    lastReader = std::max(lastReader, last);
    if (lastReader <= k) best = k;
  }
  return Group(run.begin(), run.begin() + (std::ptrdiff_t)best + 1);
}

/// The most kernels a node runs ahead of its place: a few, as between a gradient and its
/// siblings; not the whole way back to the forward values a recomputed node reads, which would
/// undo the recomputation (and keep its result alive as long).
constexpr size_t kMaxHoist = 8;

/// Elementwise groups as they form: which group computes and which groups read each value, so
/// that a node finds the groups it may join.
struct Fusion {
  std::vector<Group>& groups;
  std::map<const ir::Value*, size_t> computedIn;
  std::map<const ir::Value*, std::set<size_t>> readIn;
  std::set<size_t> elementwise; // the groups that take more elementwise nodes

  void place(const ir::Node* n, size_t group) {
    groups[group].push_back(n);
    for (const ir::Value* v : n->outputs)
      if (v) computedIn[v] = group;
    for (const ir::Value* v : n->inputs)
      if (v) readIn[v].insert(group);
  }

  /// The group elementwise node n joins: the latest elementwise group of n's shape, at or after
  /// every group that computes an input of n (n runs there, so its inputs are ready) and among
  /// the last kMaxHoist, that computes one of n's inputs or reads one of n's shape (siblings
  /// share its loads).
  std::optional<size_t> target(const ir::Node& n) {
    const auto& shape = n.outputs[0]->type.shape();
    size_t ready = 0;
    std::set<size_t> related;
    for (const ir::Value* v : n.inputs) {
      if (!v) continue;
      if (auto it = computedIn.find(v); it != computedIn.end()) {
        ready = std::max(ready, it->second);
        related.insert(it->second);
      }
      if (v->type.isStatic() && v->type.shape() == shape)
        if (auto it = readIn.find(v); it != readIn.end()) related.insert(it->second.begin(), it->second.end());
    }
    ready = std::max(ready, groups.size() > kMaxHoist ? groups.size() - kMaxHoist : 0);
    for (auto it = related.rbegin(); it != related.rend() && *it >= ready; ++it)
      if (elementwise.count(*it) && groups[*it].size() < kMaxFused && groups[*it][0]->outputs[0]->type.shape() == shape) return *it;
    return std::nullopt;
  }
};

/// The most groups a group moves later to join the one that reads it: far enough for a chain of
/// movements and elementwise nodes, not so far that its operands stay alive across the step.
constexpr size_t kMaxSink = 48;

/// The most times a fused kernel computes one value at one of its elements (once for each
/// different index its readers ask for it at).
constexpr size_t kMaxEvaluations = 4;

/// How many times a kernel over `group` (lowered by kir::lowerElementwise) computes its most
/// computed value at one element: the indices a value is read at are its readers' own where
/// they read it element for element (an elementwise node of its shape, a view), new ones
/// elsewhere (a broadcast, a movement's index map).
size_t evaluations(const Group& group) {
  std::map<const ir::Value*, std::set<int>> at; // the indices each value is computed at
  std::map<const ir::Value*, const ir::Node*> inside;
  for (const ir::Node* n : group) inside[n->outputs[0]] = n;
  const auto& shape = group.back()->outputs[0]->type.shape();
  int fresh = 1; // index 0: the kernel's element
  size_t most = 1;
  for (size_t k = group.size(); k-- > 0;) {
    const ir::Node* n = group[k];
    std::set<int>& mine = at[n->outputs[0]];
    if (n->outputs[0]->type.shape() == shape) mine.insert(0);
    most = std::max(most, mine.size());
    bool view = kir::keepsElementOrder(*n);
    for (const ir::Value* v : n->inputs) {
      if (!v || !inside.count(v)) continue;
      bool same = view || (kir::isFusibleElementwise(*n) && v->type.shape() == n->outputs[0]->type.shape());
      for (int i : mine) at[v].insert(same ? i : fresh++);
    }
  }
  return most;
}

/// A lone Transpose that a matrix product reads: a GEMM may read its source transposed instead
/// (absorbTransposes), at no cost.
bool operandTranspose(const Group& group, Readers& readers) {
  if (group.size() != 1 || group[0]->op != ir::Op::Transpose) return false;
  const auto& rs = readers.of[group[0]->outputs[0]];
  return std::any_of(rs.begin(), rs.end(), [](const ir::Node* r) { return isProduct(*r); });
}

/// Producer-consumer fusion: a group of fusible nodes (elementwise, data movement) whose results
/// are all read by one later group of fusible nodes, at most kMaxSink after it, joins that group,
/// which computes its values where it reads them (through broadcasts and the movements' index
/// maps) and stores none of them. Groups are visited last to first, so that a chain of them
/// (the rotary embedding's transpose, slices, negation, concatenation and products) ends in
/// the last one's group. Where the kernel would compute a value more than kMaxEvaluations
/// times an element, the groups stay apart.
std::vector<Group> sinkIntoReaders(std::vector<Group> groups, Readers& readers) {
  std::map<const ir::Node*, size_t> groupOf;
  for (size_t i = 0; i < groups.size(); ++i)
    for (const ir::Node* n : groups[i]) groupOf[n] = i;
  for (size_t p = groups.size(); p-- > 0;) {
    Group& producer = groups[p];
    if (producer.empty() || !allFusible(producer) || hasRefresh(producer)) continue;
    std::optional<size_t> reader;
    bool one = true;
    for (const ir::Node* n : producer) {
      if (readers.escaping.count(n->outputs[0])) one = false;
      for (const ir::Node* r : readers.of[n->outputs[0]]) {
        size_t at = groupOf.at(r);
        if (at == p) continue;
        one = one && (!reader || *reader == at);
        reader = at;
      }
    }
    if (!one || !reader || *reader - p > kMaxSink) continue;
    Group& consumer = groups[*reader];
    if (!allFusible(consumer) || consumer.size() + producer.size() > kMaxFused || operandTranspose(consumer, readers)) continue;
    Group merged(producer);
    merged.insert(merged.end(), consumer.begin(), consumer.end());
    if (evaluations(merged) > kMaxEvaluations) continue;
    for (const ir::Node* n : producer) groupOf[n] = *reader;
    consumer = std::move(merged);
    producer.clear();
  }
  groups.erase(std::remove_if(groups.begin(), groups.end(), [](const Group& g) { return g.empty(); }), groups.end());
  return groups;
}

} // namespace

std::vector<std::vector<const ir::Node*>> kernelSchedule(const ir::Graph& g) {
  Readers readers(g);
  std::vector<const ir::Node*> nodes;
  for (const auto& n : g.nodes()) nodes.push_back(n.get());
  std::vector<Group> groups;
  Fusion fusion{groups, {}, {}, {}};
  std::set<const ir::Node*> placed; // a product's epilogue, placed with it
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node* n = nodes[i];
    if (placed.count(n)) continue;
    if (isProduct(*n)) {
      Group run = productRun(nodes, i, readers);
      groups.emplace_back();
      for (const ir::Node* m : run) {
        fusion.place(m, groups.size() - 1);
        placed.insert(m);
      }
      continue;
    }
    bool elementwise = kir::isFusibleElementwise(*n) && n->outputs[0]->type.isStatic() && !isRefresh(*n);
    std::optional<size_t> into = elementwise ? fusion.target(*n) : std::nullopt;
    if (!into) {
      groups.emplace_back();
      into = groups.size() - 1;
      if (elementwise) fusion.elementwise.insert(*into);
    }
    fusion.place(n, *into);
  }
  return sinkIntoReaders(mergeRowGroups(std::move(groups), readers), readers);
}

std::set<const ir::Value*> groupInternals(const ir::Graph& g, const std::vector<std::vector<const ir::Node*>>& schedule) {
  Readers readers(g);
  std::set<const ir::Value*> out;
  for (const Group& group : schedule) {
    if (group.size() < 2 || !allFusible(group)) continue;
    for (size_t k = 0; k + 1 < group.size(); ++k)
      if (!readers.outside(group[k]->outputs[0], group)) out.insert(group[k]->outputs[0]);
  }
  return out;
}

} // namespace sgc::codegen
