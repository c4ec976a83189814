// The geometry of a FusedAttention(Grad) node, shared by its CPU lowering
// (LowerAttention.cpp) and its GPU one (LowerAttentionGpu.cpp).
#pragma once
#include "ir/Graph.h"

namespace sgc::kir {

/// `heads` independent problems (the product of the leading dims) of tq queries and tk keys
/// of width d, values of width dv; operands [..., H, T, D], or with layout "bthd" [..., T, H, D]
/// (then h = H: a problem's rows are h rows apart), or with "bt3hd" one operand
/// [..., T, 3, H, D] holding q, k and v (`packed`; the result and the row statistics are then
/// as with "bthd", and the gradient's first result is the operand's whole gradient). With
/// grouped-query attention ("bhtd", k and v [..., H / group, T, D]) problem p reads the keys and
/// values of problem p / group, and dk and dv come per query head, [..., H, T, D]. The result
/// (its gradient, the row statistics) is laid out as the operands, or with result_layout "bthd"
/// [..., T, H, Dv] from "bhtd" operands (`resultBthd`; h = H then too).
struct AttentionGeometry {
  const ir::Node& n;
  int64_t heads, tq, tk, d, dv, h = 1, group = 1;
  double scale;
  bool causal, bthd, packed, resultBthd;

  explicit AttentionGeometry(const ir::Node& node) : n(node) {
    auto q = n.input(0)->type.shape(), v = n.input(2)->type.shape();
    std::string layout = n.getString("layout", "bhtd");
    packed = layout == "bt3hd";
    bthd = packed || layout == "bthd";
    resultBthd = bthd || n.getString("result_layout", "") == "bthd";
    size_t at = q.size() - (packed ? 4 : bthd ? 3 : 2);
    tq = q[at], d = q.back(), tk = v[at], dv = v.back();
    if (bthd) h = q[q.size() - 2];
    else if (resultBthd) h = q[q.size() - 3];
    heads = tq > 0 && d > 0 ? n.input(0)->type.staticNumel().value() / (tq * d * (packed ? 3 : 1)) : 0;
    int64_t kvHeads = tk > 0 && d > 0 ? n.input(1)->type.staticNumel().value() / (tk * d) : 0;
    if (!bthd && kvHeads > 0) group = heads / kvHeads;
    scale = n.getFloat("scale", 1.0);
    causal = n.getInt("causal", 0) != 0;
  }

  /// Its matrix products' flops, as attention benchmarks count them (bench/gpu_attention.py):
  /// forward S = Q K^T and O = P V, 2 tq tk (d + dv) a problem; the gradient's S again, dP, dV, dK
  /// and dQ, 2 tq tk (3 d + 2 dv); a causal problem half of that.
  double flops(bool gradient) const {
    double pairs = (double)heads * (double)tq * (double)tk / (causal ? 2 : 1);
    return 2 * pairs * (gradient ? 3 * d + 2 * dv : d + dv);
  }

  /// The result that holds operand `which`'s gradient (0 dq, 1 dk, 2 dv).
  const ir::Value* gradOf(int which) const { return n.outputs[packed ? 0 : which]; }
};

} // namespace sgc::kir
