// Interpreter kernels of the optimizer updates: PyTorch's SGD, Adam and
// AdamW, and ONNX's preview-training Adagrad, Momentum and Adam.
#include "ir/interp/Kernels.h"

#include <cmath>

namespace sgc::ir {
namespace {

/// Whether the update applies: the optional flag input `i` (the step's loss was finite) is true or absent.
bool applies(const EvalCtx& c, size_t i) { return !c.present(i) || c.in[i]->getI(0) != 0; }

/// Results 0.. are the old values of inputs `from` (one per result): nothing changes.
Error keep(EvalCtx& c, const std::vector<size_t>& from) {
  for (size_t r = 0; r < from.size() && r < c.out.size(); ++r) c.out[r].bytes = c.in[from[r]]->bytes;
  return Error::success();
}

} // namespace

Error evalSgdUpdate(EvalCtx& c) {
  const Tensor &p = *c.in[0], &g = *c.in[1];
  const Tensor* buf = c.present(4) ? c.in[4] : nullptr;
  if (c.in[2]->numel() != 1 || c.in[3]->numel() != 1) return c.fail("lr and step must be scalars");
  double lr = c.in[2]->getF(0), momentum = c.node.getFloat("momentum", 0), dampening = c.node.getFloat("dampening", 0),
         wd = c.node.getFloat("weight_decay", 0);
  bool nesterov = c.node.getInt("nesterov", 0), first = c.in[3]->getI(0) <= 1;
  if (momentum != 0 && !buf) return c.fail("momentum needs a buffer input");
  if (!applies(c, 5)) return keep(c, {0, 4});
  for (int64_t i = 0; i < p.numel(); ++i) {
    double d = g.getF(i) + wd * p.getF(i), b = buf ? buf->getF(i) : 0.0;
    if (momentum != 0) {
      b = first ? d : momentum * b + (1 - dampening) * d;
      d = nesterov ? d + momentum * b : b;
    }
    c.out[0].setF(i, p.getF(i) - lr * d);
    if (c.out.size() > 1) c.out[1].setF(i, b);
  }
  return Error::success();
}

Error evalAdamUpdate(EvalCtx& c) {
  const Tensor &p = *c.in[0], &g = *c.in[1], &m = *c.in[2], &v = *c.in[3];
  if (c.in[4]->numel() != 1 || c.in[5]->numel() != 1) return c.fail("lr and step must be scalars");
  double lr = c.in[4]->getF(0), step = (double)c.in[5]->getI(0);
  double b1 = c.node.getFloat("beta1", 0.9), b2 = c.node.getFloat("beta2", 0.999), eps = c.node.getFloat("eps", 1e-8),
         wd = c.node.getFloat("weight_decay", 0);
  bool decoupled = c.node.getInt("decoupled", 0); // AdamW
  double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
  bool copy = c.out.size() > 3; // the new parameter's bf16 copy, rounded from its float32 value
  if (!applies(c, 6)) {
    if (copy) c.out[3] = Tensor::fromF64(DType::BF16, p.shape, p.toF64());
    return keep(c, {0, 2, 3});
  }
  for (int64_t i = 0; i < p.numel(); ++i) {
    double w = p.getF(i), d = g.getF(i);
    if (decoupled) w *= 1 - lr * wd;
    else d += wd * w;
    double mi = b1 * m.getF(i) + (1 - b1) * d, vi = b2 * v.getF(i) + (1 - b2) * d * d;
    double denom = std::sqrt(vi) / std::sqrt(bc2) + eps;
    c.out[0].setF(i, w - lr / bc1 * mi / denom);
    c.out[1].setF(i, mi);
    c.out[2].setF(i, vi);
    if (copy) c.out[3].setF(i, c.out[0].getF(i));
  }
  return Error::success();
}

/// The interpreter is one rank: the sum over ranks is the value, the average too.
Error evalCollective(EvalCtx& c) {
  for (size_t i = 0; i < c.in.size(); ++i) c.out[i].bytes = c.in[i]->bytes;
  return Error::success();
}

/// ZeRO-1's collectives on the interpreter's one rank: copies, when the graph was built for one.
Error evalRanksCollective(EvalCtx& c) {
  if (c.node.getInt("world", 1) != 1)
    return c.fail("built for " + std::to_string(c.node.getInt("world", 1)) + " ranks; the interpreter runs one (compile it and use mpirun)");
  c.out[0].bytes = c.in[0]->bytes;
  return Error::success();
}

Error evalPreviewOptimizer(EvalCtx& c) {
  Op op = c.node.op;
  int groups = op == Op::Adam ? 4 : 3;
  int64_t n = ((int64_t)c.in.size() - 2) / groups;
  if (c.in[0]->numel() != 1 || c.in[1]->numel() != 1) return c.fail("R and T must be scalars");
  double r = c.in[0]->getF(0);
  int64_t t = c.in[1]->getI(0);
  double normCoef = c.node.getFloat("norm_coefficient", 0);
  for (int64_t k = 0; k < n; ++k) {
    const Tensor &x = *c.in[2 + k], &g = *c.in[2 + n + k], &s1 = *c.in[2 + 2 * n + k];
    for (const Tensor* other : {&g, &s1})
      if (other->shape != x.shape) return c.fail("optimizer tensors must share the shape of X");
    for (int64_t i = 0; i < x.numel(); ++i) {
      double xi = x.getF(i), gr = normCoef * xi + g.getF(i);
      if (op == Op::Adagrad) {
        double rate = r / (1 + (double)t * c.node.getFloat("decay_factor", 0));
        double h = s1.getF(i) + gr * gr;
        c.out[k].setF(i, xi - rate * gr / (std::sqrt(h) + c.node.getFloat("epsilon", 0)));
        c.out[n + k].setF(i, h);
      } else if (op == Op::Momentum) {
        double alpha = c.node.getFloat("alpha", 0), beta = t > 0 ? c.node.getFloat("beta", 0) : 1.0;
        double vel = alpha * s1.getF(i) + beta * gr;
        bool nesterov = c.node.getString("mode", "standard") == "nesterov";
        c.out[k].setF(i, xi - r * (nesterov ? gr + alpha * vel : vel));
        c.out[n + k].setF(i, vel);
      } else {
        const Tensor& s2 = *c.in[2 + 3 * n + k];
        if (s2.shape != x.shape) return c.fail("optimizer tensors must share the shape of X");
        double alpha = c.node.getFloat("alpha", 0.9), beta = c.node.getFloat("beta", 0.999);
        double vel = alpha * s1.getF(i) + (1 - alpha) * gr, h = beta * s2.getF(i) + (1 - beta) * gr * gr;
        double rate = t > 0 ? r * std::sqrt(1 - std::pow(beta, (double)t)) / (1 - std::pow(alpha, (double)t)) : r;
        double xn = xi - rate * vel / (std::sqrt(h) + c.node.getFloat("epsilon", 1e-6));
        c.out[k].setF(i, (1 - c.node.getFloat("norm_coefficient_post", 0)) * xn);
        c.out[n + k].setF(i, vel);
        c.out[2 * n + k].setF(i, h);
      }
    }
  }
  return Error::success();
}

} // namespace sgc::ir
