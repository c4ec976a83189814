// ONNX's Einsum as IR ops at import: each operand's repeated labels become
// diagonals (a product with an identity mask, summed), labels no one else
// needs are summed away, and operands are combined left to right as batched
// matrix products (shared labels still needed later are batch dims, the other
// shared labels are contracted), the result transposed into the output's
// order. Ellipses stand for the broadcast leading dims.
#include "frontend/onnx/Build.h"

#include <algorithm>
#include <set>

namespace sgc::onnx_import {
namespace {

using ir::Op;
using Labels = std::vector<std::string>; // "a".."z", "A".."Z", or "#k" for ellipsis dim k

struct Term {
  ir::Value* v;
  Labels labels;
  std::vector<int64_t> shape;
};

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

/// The labels of one term, the ellipsis (if any) as `dims` labels #(E - dims)..#(E - 1).
Expected<Labels> parseTerm(ImportCtx& c, const std::string& t, int64_t dims, int64_t ellipsis) {
  Labels out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t.compare(i, 3, "...") == 0) {
      for (int64_t k = ellipsis - dims; k < ellipsis; ++k) out.push_back("#" + std::to_string(k));
      i += 2;
    } else if (isalpha((unsigned char)t[i])) {
      out.push_back(std::string(1, t[i]));
    } else if (t[i] != ' ') {
      return c.fail("unexpected '" + std::string(1, t[i]) + "' in the equation");
    }
  }
  return out;
}

/// The term with its repeated labels replaced by their diagonals.
Term diagonals(Build& b, Term t) {
  for (size_t i = 0; i < t.labels.size(); ++i)
    for (size_t j = i + 1; j < t.labels.size(); ++j) {
      if (t.labels[i] != t.labels[j]) continue;
      int64_t n = t.shape[i];
      std::vector<int64_t> es(t.shape.size(), 1);
      es[i] = es[j] = n;
      ir::Tensor eye(ir::DType::F64, es);
      std::vector<int64_t> st(es.size(), 1);
      for (size_t d = es.size(); d-- > 1;) st[d - 1] = st[d] * es[d];
      for (int64_t k = 0; k < n; ++k) eye.setF(k * st[i] + k * st[j], 1);
      ir::Value* mask = b.op(Op::CastLike, {b.c.graph.addConst(b.c.graph.uniqueName(b.name + "/eye"), std::move(eye)), t.v});
      t.v = b.op(Op::ReduceSum, {b.op(Op::Mul, {t.v, mask}), b.ints({(int64_t)j})}, {{"keepdims", int64_t(0)}});
      t.labels.erase(t.labels.begin() + (ptrdiff_t)j);
      t.shape.erase(t.shape.begin() + (ptrdiff_t)j);
      --j;
    }
  return t;
}

/// The term with the labels outside `keep` summed away.
Term sumAway(Build& b, Term t, const std::set<std::string>& keep) {
  std::vector<int64_t> axes;
  Term out{nullptr, {}, {}};
  for (size_t i = 0; i < t.labels.size(); ++i) {
    if (keep.count(t.labels[i])) {
      out.labels.push_back(t.labels[i]);
      out.shape.push_back(t.shape[i]);
    } else {
      axes.push_back((int64_t)i);
    }
  }
  out.v = axes.empty() ? t.v : b.op(Op::ReduceSum, {t.v, b.ints(axes)}, {{"keepdims", int64_t(0)}});
  return out;
}

/// `t` transposed so that its labels come in `order` (a permutation of them).
ir::Value* arrange(Build& b, const Term& t, const Labels& order) {
  std::vector<int64_t> perm;
  for (const auto& l : order) perm.push_back(std::find(t.labels.begin(), t.labels.end(), l) - t.labels.begin());
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == (int64_t)i;
  return identity ? t.v : b.op(Op::Transpose, {t.v}, {{"perm", perm}});
}

int64_t dimOf(const Term& t, const std::string& l) { return t.shape[std::find(t.labels.begin(), t.labels.end(), l) - t.labels.begin()]; }

/// a and b combined: labels both hold and `later` needs are batch dims, the other shared ones
/// contracted, as one batched MatMul of [batch..., freeA, K] by [batch..., K, freeB].
Expected<Term> combine(Build& b, const Term& a, const Term& bt, const std::set<std::string>& later) {
  Labels batch, contracted, freeA, freeB;
  for (const auto& l : a.labels) {
    bool shared = std::count(bt.labels.begin(), bt.labels.end(), l);
    (shared ? (later.count(l) ? batch : contracted) : freeA).push_back(l);
  }
  for (const auto& l : bt.labels)
    if (!std::count(a.labels.begin(), a.labels.end(), l)) freeB.push_back(l);
  std::vector<int64_t> bs, fa, fb;
  for (const auto& l : batch) bs.push_back(std::max(dimOf(a, l), dimOf(bt, l)));
  for (const auto& l : contracted)
    if (dimOf(a, l) != dimOf(bt, l)) return b.c.fail("label '" + l + "' is contracted over dims of different sizes");
  std::vector<int64_t> k;
  for (const auto& l : contracted) k.push_back(dimOf(a, l));
  for (const auto& l : freeA) fa.push_back(dimOf(a, l));
  for (const auto& l : freeB) fb.push_back(dimOf(bt, l));
  auto batchOf = [&](const Term& t) {
    std::vector<int64_t> d;
    for (const auto& l : batch) d.push_back(dimOf(t, l));
    return d;
  };
  Labels oa = batch, ob = batch;
  oa.insert(oa.end(), freeA.begin(), freeA.end());
  oa.insert(oa.end(), contracted.begin(), contracted.end());
  ob.insert(ob.end(), contracted.begin(), contracted.end());
  ob.insert(ob.end(), freeB.begin(), freeB.end());
  std::vector<int64_t> sa = batchOf(a), sb = batchOf(bt);
  sa.push_back(product(fa)), sa.push_back(product(k));
  sb.push_back(product(k)), sb.push_back(product(fb));
  ir::Value* m = b.op(Op::MatMul, {b.op(Op::Reshape, {arrange(b, a, oa), b.ints(sa)}), b.op(Op::Reshape, {arrange(b, bt, ob), b.ints(sb)})});
  Term out{nullptr, batch, bs};
  out.labels.insert(out.labels.end(), freeA.begin(), freeA.end());
  out.labels.insert(out.labels.end(), freeB.begin(), freeB.end());
  out.shape.insert(out.shape.end(), fa.begin(), fa.end());
  out.shape.insert(out.shape.end(), fb.begin(), fb.end());
  out.v = b.op(Op::Reshape, {m, b.ints(out.shape)});
  return out;
}

} // namespace

Error importEinsum(ImportCtx& c, const onnx::NodeProto& n, const std::string& name) {
  Build b{c, name};
  std::string eq = stringAttr(n, "equation", "");
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t at = 0;;) {
    size_t comma = lhs.find(',', at);
    terms.push_back(lhs.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if ((int)terms.size() != n.input_size()) return c.fail("the equation has " + std::to_string(terms.size()) + " terms for " + std::to_string(n.input_size()) + " inputs");
  std::vector<Term> ops;
  int64_t ellipsis = 0;
  std::vector<int64_t> lettersOf;
  for (size_t i = 0; i < terms.size(); ++i) {
    auto v = inputOf(c, n, (int)i);
    if (!v) return v.takeError();
    if (!*v) return c.fail("input " + std::to_string(i) + " is missing");
    auto s = b.shape(*v);
    if (!s) return s.takeError();
    int64_t letters = std::count_if(terms[i].begin(), terms[i].end(), [](char ch) { return isalpha((unsigned char)ch); });
    lettersOf.push_back(letters);
    if (terms[i].find("...") != std::string::npos) ellipsis = std::max(ellipsis, (int64_t)s->size() - letters);
    ops.push_back({*v, {}, *s});
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    bool hasEllipsis = terms[i].find("...") != std::string::npos;
    auto l = parseTerm(c, terms[i], hasEllipsis ? (int64_t)ops[i].shape.size() - lettersOf[i] : 0, ellipsis);
    if (!l) return l.takeError();
    if (l->size() != ops[i].shape.size()) return c.fail("term '" + terms[i] + "' does not match input " + std::to_string(i) + "'s rank");
    ops[i].labels = *l;
  }
  Labels out;
  if (arrow != std::string::npos) {
    auto o = parseTerm(c, eq.substr(arrow + 2), ellipsis, ellipsis);
    if (!o) return o.takeError();
    out = *o;
  } else { // implicit: the ellipsis, then the letters that appear once, in order
    for (int64_t k = 0; k < ellipsis; ++k) out.push_back("#" + std::to_string(k));
    std::map<std::string, int> uses;
    for (const auto& t : ops)
      for (const auto& l : t.labels) ++uses[l];
    for (const auto& [l, u] : uses)
      if (u == 1 && l[0] != '#') out.push_back(l);
  }
  std::set<std::string> outSet(out.begin(), out.end());
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i] = diagonals(b, ops[i]);
    std::set<std::string> keep = outSet;
    for (size_t j = 0; j < ops.size(); ++j)
      if (j != i) keep.insert(ops[j].labels.begin(), ops[j].labels.end());
    ops[i] = sumAway(b, ops[i], keep);
  }
  Term acc = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    std::set<std::string> later = outSet;
    for (size_t j = i + 1; j < ops.size(); ++j) later.insert(ops[j].labels.begin(), ops[j].labels.end());
    auto r = combine(b, acc, ops[i], later);
    if (!r) return r.takeError();
    acc = *r;
  }
  acc = sumAway(b, acc, outSet);
  for (const auto& l : out)
    if (!std::count(acc.labels.begin(), acc.labels.end(), l)) return c.fail("output label '" + l + "' is in no input");
  b.output(n, 0, arrange(b, acc, out));
  return Error::success();
}

} // namespace sgc::onnx_import
