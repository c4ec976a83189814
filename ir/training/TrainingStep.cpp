// The training-step builder (see TrainingStep.h).
#include "ir/training/TrainingStep.h"

#include "ir/Verifier.h"
#include "ir/autodiff/Autodiff.h"
#include "ir/passes/AttentionLayout.h"
#include "ir/passes/PackAttention.h"
#include "ir/passes/ChunkClassifier.h"
#include "ir/passes/FuseLossGrad.h"
#include "ir/passes/Autocast.h"
#include "ir/passes/FoldTransposes.h"
#include "ir/passes/ForwardCopies.h"
#include "ir/passes/FuseAttention.h"
#include "ir/passes/FuseGelu.h"
#include "ir/passes/FuseRmsNorm.h"
#include "ir/passes/NarrowMoves.h"
#include "ir/passes/WidenSums.h"
#include "ir/passes/ShadowWeights.h"
#include "ir/passes/DataParallel.h"
#include "ir/passes/InferShapes.h"

#include <algorithm>
#include <regex>
#include <set>

namespace sgc::ir {
namespace {

Expected<Value*> findLoss(const Graph& g, const std::string& name) {
  std::string names;
  for (Value* v : g.outputs) names += (names.empty() ? "" : ", ") + v->name;
  if (!name.empty()) {
    for (Value* v : g.outputs)
      if (v->name == name) return v;
    return makeError("loss '" + name + "' is not an output of the model (outputs: " + names + ")");
  }
  std::vector<Value*> scalars;
  for (Value* v : g.outputs)
    if (isFloat(v->type.dtype) && v->type.staticNumel() == 1) scalars.push_back(v);
  if (scalars.size() == 1) return scalars[0];
  return makeError("the model has " + std::to_string(scalars.size()) + " scalar outputs (outputs: " + names +
                   "); name the loss with --loss");
}

/// Training-mode BatchNormalization: running statistics become updates, not trainable.
void collectRunningStats(Graph& g, std::set<Value*>& buffers) {
  for (auto& n : g.nodes()) {
    if (n->op != Op::BatchNormalization || !n->getInt("training_mode", 0)) continue;
    while (n->outputs.size() < 3) g.addResult(n.get(), n->name + ".running");
    for (int i = 1; i <= 2; ++i) {
      Value* stat = n->inputs[2 + i];
      if (stat->kind != ValueKind::Param || buffers.count(stat)) continue;
      if (!n->outputs[i]) { // an unused result: give it a value
        Value* v = g.addResult(n.get(), n->name + ".running");
        n->outputs.pop_back();
        n->outputs[i] = v;
      }
      buffers.insert(stat);
      g.updates.push_back({stat, n->outputs[i]});
    }
  }
}

Value* scalarConst(Graph& g, const std::string& name, double v, DType t) {
  return g.addConst(g.uniqueName(name), Tensor::fromF64(t, {}, {v}));
}

Value* emit(Graph& g, Op op, std::vector<Value*> ins, const std::string& name, std::map<std::string, Attr> attrs = {}) {
  Node* n = g.addNode(op, std::move(ins), 1, name);
  n->attrs = std::move(attrs);
  return n->outputs[0];
}

/// g_i * min(1, max_norm / (||g||_2 + 1e-6)), as torch.nn.utils.clip_grad_norm_.
/// With `sharded`, each rank holds a shard of every gradient: the squares are summed over the ranks.
void clipByGlobalNorm(Graph& g, std::vector<std::pair<Value*, Value*>>& grads, double maxNorm, bool sharded) {
  DType t = grads[0].second->type.dtype;
  Value* total = nullptr;
  for (auto& [p, grad] : grads) {
    Value* sq = emit(g, Op::ReduceSumSquare, {grad}, "clip.sq", {{"keepdims", int64_t(0)}});
    if (sq->type.dtype != t) sq = emit(g, Op::Cast, {sq}, "clip.cast", {{"to", std::string(dtypeName(t))}});
    total = total ? emit(g, Op::Add, {total, sq}, "clip.sum") : sq;
  }
  if (sharded) total = emit(g, Op::AllReduce, {total}, "clip.allreduce", {{"bucket", int64_t(-2)}, {"average", int64_t(0)}});
  Value* norm = emit(g, Op::Sqrt, {total}, "clip.norm");
  Value* coef = emit(g, Op::Div, {scalarConst(g, "clip.max", maxNorm, t), emit(g, Op::Add, {norm, scalarConst(g, "clip.eps", 1e-6, t)}, "clip.denom")}, "clip.ratio");
  coef = emit(g, Op::Min, {coef, scalarConst(g, "clip.one", 1, t)}, "clip.coef");
  for (auto& [p, grad] : grads) grad = emit(g, Op::Mul, {grad, coef}, p->name + ".clipped");
}

/// Tensors of zeros by dtype and shape, shared by the optimizer state that starts from them (a
/// Llama-style model's moments: 3.9 GB of zeros, one each, filled and paged in by the compiler).
using Zeros = std::map<std::pair<DType, std::vector<int64_t>>, std::shared_ptr<const Tensor>>;

/// The optimizer's update of `p` (registered as its update unless `p` is not a parameter): the new value.
Value* addOptimizer(Graph& g, const OptimizerOptions& o, Value* p, Value* grad, Value* lr, Value* step, Zeros& shared) {
  auto zeros = [&](const char* suffix) {
    std::shared_ptr<const Tensor>& z = shared[{p->type.dtype, p->type.shape()}];
    if (!z) z = std::make_shared<const Tensor>(p->type.dtype, p->type.shape());
    return g.addState(g.uniqueName(p->name + suffix), z);
  };
  bool adam = o.kind != "sgd";
  double wd = o.weightDecay >= 0 ? o.weightDecay : (o.kind == "adamw" ? 0.01 : 0.0);
  if (!adam) {
    std::vector<Value*> ins{p, grad, lr, step};
    if (o.momentum != 0) ins.push_back(zeros(".momentum_buffer"));
    Node* n = g.addNode(Op::SgdUpdate, ins, o.momentum != 0 ? 2 : 1, p->name + ".sgd");
    n->attrs = {{"momentum", o.momentum}, {"dampening", o.dampening}, {"nesterov", int64_t(o.nesterov)}, {"weight_decay", wd}};
    if (p->kind == ValueKind::Param) g.updates.push_back({p, n->outputs[0]});
    if (o.momentum != 0) g.updates.push_back({ins[4], n->outputs[1]});
    return n->outputs[0];
  }
  Value *m = zeros(".exp_avg"), *v = zeros(".exp_avg_sq");
  Node* n = g.addNode(Op::AdamUpdate, {p, grad, m, v, lr, step}, 3, p->name + "." + o.kind);
  n->attrs = {{"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}, {"weight_decay", wd}, {"decoupled", int64_t(o.kind == "adamw")}};
  if (p->kind == ValueKind::Param) g.updates.push_back({p, n->outputs[0]});
  g.updates.push_back({m, n->outputs[1]});
  g.updates.push_back({v, n->outputs[2]});
  return n->outputs[0];
}

/// Makes every update of the step wait on its loss being finite (with data parallelism the loss
/// is already the mean over the ranks, finite only when every rank's is): the optimizers take the
/// flag as their `apply` input and keep their old values without it (in place, as the memory plan
/// writes them); any other update (the step counter, BatchNormalization's running statistics)
/// becomes Where(finite, new, old). A host that sees a NaN loss then finds the parameters and the
/// optimizer's state as they were before the step.
void applyOnlyIfFinite(Graph& g, Value* loss) {
  // loss - loss is NaN exactly when the loss is NaN or infinite (one fused kernel of three nodes).
  Value* zero = emit(g, Op::Sub, {loss, loss}, "sgc.loss.zero");
  Value* bad = emit(g, Op::IsNaN, {zero}, "sgc.loss.nonfinite");
  Value* finite = emit(g, Op::Not, {bad}, "sgc.loss.finite");
  // The flag's nodes (appended last) run right after the loss, before the updates that read it.
  std::set<const Node*> flagNodes{zero->producer, bad->producer, finite->producer};
  std::vector<Node*> order;
  for (auto& n : g.nodes()) {
    if (flagNodes.count(n.get())) continue;
    order.push_back(n.get());
    if (n.get() == loss->producer)
      for (auto& m : g.nodes())
        if (flagNodes.count(m.get())) order.push_back(m.get());
  }
  g.setOrder(order);
  auto isOptimizer = [](const Node* n) { return n && (n->op == Op::SgdUpdate || n->op == Op::AdamUpdate); };
  for (auto& n : g.nodes())
    if (isOptimizer(n.get())) {
      n->inputs.resize(n->op == Op::AdamUpdate ? 7 : 6, nullptr);
      n->inputs.back() = finite;
    }
  for (auto& [target, next] : g.updates) {
    const Node* n = next->producer; // ZeRO-1: the parameter gathered from the ranks' updated shards
    while (n && (n->op == Op::Reshape || n->op == Op::Slice || n->op == Op::AllGather)) n = n->inputs[0]->producer;
    if (!isOptimizer(n)) next = emit(g, Op::Where, {finite, next, target}, target->name + ".if_finite");
  }
}

} // namespace

Error checkTrainingOptions(const TrainingOptions& opts) {
  const OptimizerOptions& o = opts.optimizer;
  if (o.kind != "sgd" && o.kind != "adam" && o.kind != "adamw")
    return makeError("unknown optimizer '" + o.kind + "' (expected sgd, adam or adamw)");
  if (!(o.lr >= 0)) return makeError("the learning rate must be non-negative");
  if (o.momentum < 0 || o.dampening < 0) return makeError("momentum and dampening must be non-negative");
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) return makeError("nesterov needs a momentum and zero dampening");
  if (!(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1)) return makeError("betas must be in [0, 1)");
  if (!(o.eps >= 0) || !(o.clipGradNorm >= 0)) return makeError("eps and clip-grad-norm must be non-negative");
  if (opts.precision != "f32" && opts.precision != "bf16") return makeError("unknown precision '" + opts.precision + "' (expected f32 or bf16)");
  if (opts.attention != "fused" && opts.attention != "decomposed")
    return makeError("unknown --attention '" + opts.attention + "' (expected fused or decomposed)");
  if (opts.dataParallel != "none" && opts.dataParallel != "allreduce" && opts.dataParallel != "zero1")
    return makeError("unknown --data-parallel '" + opts.dataParallel + "' (expected none, allreduce or zero1)");
  if ((opts.dataParallel == "zero1") != (opts.ranks > 0))
    return makeError("--ranks N (the ranks the optimizer state is sharded over) goes with --data-parallel zero1, and only with it");
  if (!(opts.bucketMb > 0)) return makeError("--bucket-mb must be positive");
  try {
    std::regex r(opts.freeze);
  } catch (const std::regex_error& e) {
    return makeError("--freeze '" + opts.freeze + "' is not a valid regular expression");
  }
  return Error::success();
}

/// Refuses a graph that is not its module's training graph, or a loss that reads a constant an
/// exporter folded out of parameters in a way training could not follow (Graph::untrainable).
Error checkTrainable(const Graph& g, const Value* loss) {
  if (!g.notTrainable.empty()) return makeError("this graph cannot be trained as its module trains: " + g.notTrainable);
  if (g.untrainable.empty()) return Error::success();
  std::set<const Value*> seen{loss};
  std::vector<const Value*> todo{loss};
  while (!todo.empty()) {
    const Value* v = todo.back();
    todo.pop_back();
    if (v->kind == ValueKind::Const && g.untrainable.count(v->name))
      return makeError("the loss depends on %" + v->name + ", which cannot be trained as the module's parameters are: it was " +
                       g.untrainable.at(v->name));
    if (v->producer)
      for (const Value* in : v->producer->inputs)
        if (in && seen.insert(in).second) todo.push_back(in);
  }
  return Error::success();
}

Error buildTrainingStep(Graph& g, const TrainingOptions& opts) {
  if (Error e = checkTrainingOptions(opts)) return e;
  if (Error e = inferShapes(g)) return e;
  auto loss = findLoss(g, opts.loss);
  if (!loss) return loss.takeError();
  if (Error e = checkTrainable(g, *loss)) return e;
  if (!isFloat((*loss)->type.dtype) || (*loss)->type.staticNumel() != 1)
    return makeError("loss '" + (*loss)->name + "' is " + toString((*loss)->type) + ", expected a floating-point scalar");
  if (g.findValue(kLrInput) || g.findValue(kStepState)) return makeError("the model already has a value named sgc.lr or sgc.step");
  Value* lr = g.addInput(kLrInput, Type::of(DType::F32, {}));
  Value* step = g.addState(kStepState, Tensor::scalarI64(0));
  Value* nextStep = emit(g, Op::Add, {step, g.addConst("sgc.one", Tensor::scalarI64(1))}, "sgc.step.next");
  // The step is counted first: training-mode Dropout in the forward pass reads it.
  std::vector<Node*> order{nextStep->producer};
  for (auto& n : g.nodes())
    if (n.get() != nextStep->producer) order.push_back(n.get());
  g.setOrder(order);
  g.updates.push_back({step, nextStep});

  if (Error e = forwardCopies(g)) return e; // the patterns below match producers, not their copies
  if (Error e = fuseGelu(g)) return e;
  if (Error e = fuseRmsNorm(g)) return e;
  if (opts.attention == "fused") {
    if (Error e = fuseAttention(g)) return e;
    if (Error e = attentionLayout(g)) return e;
    if (Error e = packAttention(g)) return e; // before autodiff: the gradient comes out packed too
  }
  if (opts.precision == "bf16")
    if (Error e = autocastBf16(g)) return e;
  std::set<Value*> buffers;
  collectRunningStats(g, buffers);
  for (auto& n : g.nodes())
    if (n->op == Op::Dropout && n->input(2)) {
      n->inputs.resize(4, nullptr);
      n->inputs[3] = nextStep;
    }
  std::regex freeze(opts.freeze.empty() ? "$^" : opts.freeze);
  std::vector<Value*> trainable;
  for (Value* p : g.params)
    if (!buffers.count(p) && (opts.freeze.empty() || !std::regex_search(p->name, freeze))) trainable.push_back(p);
  if (trainable.empty())
    return makeError(g.params.empty() ? "the model has nothing to train (no floating-point initializers)"
                                      : "nothing to train: --freeze '" + opts.freeze + "' matches every parameter");
  auto grads = autodiff(g, *loss, trainable);
  if (!grads) return grads.takeError();
  std::vector<std::pair<Value*, Value*>> pairs;
  for (Value* p : trainable)
    if ((*grads)[p]) pairs.push_back({p, (*grads)[p]});
  if (pairs.empty()) return makeError("the loss '" + (*loss)->name + "' does not depend on any trainable parameter");
  if (opts.precision == "bf16") {
    if (Error e = widenSums(g)) return e;
    if (Error e = narrowMoves(g)) return e;
  }
  if (opts.dataParallel == "allreduce") // before clipping: the norm is the global one
    if (Error e = insertAllReduce(g, *loss, pairs, opts.bucketMb)) return e;
  std::vector<Zero1Bucket> shards;
  if (opts.dataParallel == "zero1") { // the optimizer updates this rank's shard of each bucket
    auto b = insertZero1(g, *loss, pairs, opts.bucketMb, opts.ranks);
    if (!b) return b.takeError();
    shards = std::move(*b);
    pairs.clear();
    for (const Zero1Bucket& z : shards) pairs.push_back({z.paramShard, z.gradShard});
  }
  if (opts.optimizer.clipGradNorm > 0) clipByGlobalNorm(g, pairs, opts.optimizer.clipGradNorm, !shards.empty());
  Zeros zeros;
  for (size_t i = 0; i < pairs.size(); ++i) {
    Value* updated = addOptimizer(g, opts.optimizer, pairs[i].first, pairs[i].second, lr, nextStep, zeros);
    if (!shards.empty())
      if (Error e = gatherZero1(g, shards[i], updated)) return e;
  }
  applyOnlyIfFinite(g, *loss);
  g.outputs = {*loss};
  if (Error e = inferShapes(g)) return e;
  if (Error e = forwardCopies(g)) return e; // autodiff's SumTo to a shape it already has: a product meets its elementwise readers
  if (Error e = foldTransposes(g)) return e; // the optimizer reads the weight gradients it rewrites
  if (opts.precision == "bf16") {
    readNarrowGradients(g);
    if (Error e = shadowWeights(g)) return e; // the optimizer writes the weights' bf16 copies
  }
  if (Error e = fuseLossGrad(g)) return e; // the loss and its gradient in one pass over the scores
  if (Error e = chunkClassifier(g, opts.classifierChunkBytes)) return e; // never all the scores at once
  g.removeDeadNodes();
  return verify(g);
}

} // namespace sgc::ir
