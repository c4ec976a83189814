// The expand-resize pass (see ExpandResize.h).
#include "ir/passes/ExpandResize.h"

#include "ir/passes/Rewrite.h"
#include "ir/shapes/Shapes.h"

#include <algorithm>
#include <map>

namespace sgc::ir {
namespace {

/// One resized axis as K (index, weight) columns over its output positions.
struct AxisTaps {
  int64_t axis = 0, in = 0, out = 0;
  std::vector<std::vector<int64_t>> index;  ///< [k][y]
  std::vector<std::vector<double>> weight;  ///< [k][y]; 0 where y lies outside a crop box
  std::vector<bool> outside;                ///< [y]
};

/// The taps of `t` without zero weights and with repeated (clamped) positions merged.
AxisTaps columns(const std::vector<ResizeTap>& taps, int64_t axis, int64_t in) {
  AxisTaps a{axis, in, (int64_t)taps.size(), {}, {}, {}};
  std::vector<std::map<int64_t, double>> merged(taps.size());
  size_t k = 1;
  for (size_t y = 0; y < taps.size(); ++y) {
    for (size_t j = 0; j < taps[y].index.size(); ++j)
      if (taps[y].weight[j] != 0 && !taps[y].outside) merged[y][taps[y].index[j]] += taps[y].weight[j];
    k = std::max(k, merged[y].size());
    a.outside.push_back(taps[y].outside);
  }
  a.index.assign(k, std::vector<int64_t>(taps.size(), 0));
  a.weight.assign(k, std::vector<double>(taps.size(), 0.0));
  for (size_t y = 0; y < taps.size(); ++y) {
    size_t j = 0;
    for (auto [i, w] : merged[y]) a.index[j][y] = i, a.weight[j][y] = w, ++j;
  }
  return a;
}

/// Whether every position reads one input with weight 1 (nearest): a Gather alone.
bool plainGather(const AxisTaps& a) {
  return a.index.size() == 1 && std::all_of(a.weight[0].begin(), a.weight[0].end(), [](double w) { return w == 1; });
}

struct Plan {
  std::vector<AxisTaps> axes; ///< the resized axes, in order
  std::vector<int64_t> in, out;
};

/// The taps of a Resize (inputs from `first`: roi, scales, sizes) over an input of shape `in`,
/// or nothing when some operand is not a constant.
std::optional<Expected<Plan>> planOf(const Node& n, const std::vector<int64_t>& in, size_t first) {
  std::vector<const Tensor*> given;
  for (size_t i = first; i < first + 3; ++i) {
    const Value* v = n.input(i);
    if (v && v->kind != ValueKind::Const) return std::nullopt;
    given.push_back(v ? v->data.get() : nullptr);
  }
  InferCtx ic{n, {}, {}, {}};
  auto g = resizeGeometry(ic, in, given[0], given[1], given[2]);
  if (!g) return Expected<Plan>(g.takeError());
  Plan p{{}, in, g->out};
  for (size_t a = 0; a < in.size(); ++a) {
    if (!g->resizes(a, in[a])) continue;
    auto t = resizeTaps(ic, *g, (int64_t)a, in[a]);
    if (!t) return Expected<Plan>(t.takeError());
    p.axes.push_back(columns(*t, (int64_t)a, in[a]));
  }
  return Expected<Plan>(std::move(p));
}

class Expander {
public:
  Expander(Graph& g, const Node& n) : g_(g), n_(n), base_(n.name.empty() ? n.outputs[0]->name : n.name) {}

  /// x resized along every axis of `p`.
  Value* forward(const Plan& p, Value* x) {
    DType t = x->type.dtype;
    std::vector<int64_t> shape = p.in;
    for (const AxisTaps& a : p.axes) {
      shape[a.axis] = a.out;
      Value* sum = nullptr;
      for (size_t k = 0; k < a.index.size(); ++k) {
        Value* g = emit(Op::Gather, {x, indices(a, k)}, a.axis);
        if (!plainGather(a)) g = emit(Op::Mul, {g, weights(a, k, t, shape.size())});
        sum = sum ? emit(Op::Add, {sum, g}) : g;
      }
      x = sum;
    }
    double extrapolation = n_.getFloat("extrapolation_value", 0);
    if (extrapolation != 0 && anyOutside(p)) x = emit(Op::Add, {x, outsideTerm(p, extrapolation, t)});
    return x;
  }

  /// dy taken back through every axis of `p`, the last first.
  Value* backward(const Plan& p, Value* dy) {
    DType t = dy->type.dtype;
    std::vector<int64_t> shape = p.out;
    for (auto a = p.axes.rbegin(); a != p.axes.rend(); ++a) {
      shape[a->axis] = a->in;
      Value* to = g_.addI64s(base_ + ".shape", shape);
      Value* sum = nullptr;
      for (size_t k = 0; k < a->index.size(); ++k) {
        Value* scaled = plainGather(*a) ? dy : emit(Op::Mul, {dy, weights(*a, k, t, shape.size())});
        Value* back = emit(Op::GatherGrad, {scaled, indices(*a, k), to}, a->axis);
        sum = sum ? emit(Op::Add, {sum, back}) : back;
      }
      dy = sum;
    }
    return dy;
  }

  std::vector<Node*> made;

private:
  Value* emit(Op op, std::vector<Value*> ins, int64_t axis = -1) {
    Node* m = g_.addNode(op, std::move(ins), 1, g_.uniqueName(base_ + "." + std::string(opName(op))));
    if (axis >= 0) m->attrs["axis"] = axis;
    made.push_back(m);
    return m->outputs[0];
  }

  Value* indices(const AxisTaps& a, size_t k) {
    return g_.addConst(g_.uniqueName(base_ + ".index"), Tensor::fromI64(DType::I64, {a.out}, a.index[k]));
  }

  /// Column k's weights, shaped to broadcast along the other axes.
  Value* weights(const AxisTaps& a, size_t k, DType t, size_t rank) {
    std::vector<int64_t> shape(rank, 1);
    shape[a.axis] = a.out;
    return g_.addConst(g_.uniqueName(base_ + ".weight"), Tensor::fromF64(t, shape, a.weight[k]));
  }

  static bool anyOutside(const Plan& p) {
    for (const AxisTaps& a : p.axes)
      if (std::find(a.outside.begin(), a.outside.end(), true) != a.outside.end()) return true;
    return false;
  }

  /// extrapolation_value where some resized axis lies outside the box, else 0, over the resized axes.
  Value* outsideTerm(const Plan& p, double value, DType t) {
    std::vector<int64_t> shape(p.out.size(), 1);
    for (const AxisTaps& a : p.axes) shape[a.axis] = a.out;
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    std::vector<double> term(count, 0.0);
    for (int64_t i = 0; i < count; ++i) {
      int64_t rest = i;
      bool out = false;
      for (size_t d = shape.size(); d-- > 0;) {
        int64_t y = rest % shape[d];
        rest /= shape[d];
        for (const AxisTaps& a : p.axes)
          if ((size_t)a.axis == d && a.outside[y]) out = true;
      }
      term[i] = out ? value : 0.0;
    }
    return g_.addConst(g_.uniqueName(base_ + ".outside"), Tensor::fromF64(t, shape, term));
  }

  Graph& g_;
  const Node& n_;
  std::string base_; ///< what the new values are named after
};

} // namespace

Error expandResize(Graph& g, int* count) {
  Error failed = Error::success();
  auto rewrite = [&](Node& n) -> std::optional<std::vector<Node*>> {
    if (failed || (n.op != Op::Resize && n.op != Op::ResizeGrad)) return std::nullopt;
    bool grad = n.op == Op::ResizeGrad;
    const Value* x = n.inputs[grad ? 1 : 0];
    std::vector<int64_t> in;
    if (grad) {
      if (x->kind != ValueKind::Const) return std::nullopt;
      in = x->data->toI64();
    } else if (x->type.isStatic()) {
      in = x->type.shape();
    } else {
      return std::nullopt;
    }
    auto plan = planOf(n, in, grad ? 2 : 1);
    if (!plan) return std::nullopt;
    if (!*plan) {
      failed = plan->takeError();
      return std::nullopt;
    }
    Value* data = n.inputs[0];
    if (!isFloat(data->type.dtype)) // integers are expanded when nothing is interpolated (nearest)
      for (const AxisTaps& a : (*plan)->axes)
        if (!plainGather(a)) return std::nullopt;
    Expander e(g, n);
    Value* r = grad ? e.backward(**plan, data) : e.forward(**plan, data);
    if (e.made.empty()) { // nothing resized: the node is an identity
      Node* id = g.addNode(Op::Identity, {data}, 1, g.uniqueName(n.outputs[0]->name + ".Identity"));
      e.made.push_back(id);
      r = id->outputs[0];
    }
    g.replaceAllUses(n.outputs[0], r);
    return e.made;
  };
  Error e = rewriteInOrder(g, rewrite, true, count);
  if (failed) {
    llvm::consumeError(std::move(e));
    return failed;
  }
  return e;
}

} // namespace sgc::ir
