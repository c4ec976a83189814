// Interpreter kernels of data-movement and shape-computing ops. They move
// element bytes without converting them.
#include "ir/interp/Kernels.h"

namespace sgc::ir {

Error evalCopy(EvalCtx& c) {
  c.out[0].bytes = c.in[0]->bytes;
  return Error::success();
}

Error evalTranspose(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  std::vector<int64_t> perm = c.node.getInts("perm");
  if (perm.empty())
    for (int64_t i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
  auto xs = stridesOf(x.shape);
  int64_t o = 0;
  forEachIndex(c.out[0].shape, [&](const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (size_t i = 0; i < idx.size(); ++i) off += idx[i] * xs[perm[i]];
    copyElement(c.out[0], o++, x, off);
  });
  if (x.rank() == 0) c.out[0].bytes = x.bytes;
  return Error::success();
}

Error evalConcat(EvalCtx& c) {
  Tensor& y = c.out[0];
  int64_t axis = c.node.getInt("axis", 0);
  if (axis < 0) axis += y.rank();
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= y.shape[i];
  size_t es = dtypeSize(y.dtype), pos = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor* t : c.in) {
      size_t block = (size_t)(t->numel() / std::max<int64_t>(outer, 1)) * es;
      if (block) std::memcpy(y.bytes.data() + pos, t->bytes.data() + o * block, block);
      pos += block;
    }
  return Error::success();
}

Error evalSplit(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  int64_t axis = c.node.getInt("axis", 0);
  if (axis < 0) axis += x.rank();
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.shape[i];
  size_t es = dtypeSize(x.dtype), pos = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (Tensor& t : c.out) {
      size_t block = (size_t)(t.numel() / std::max<int64_t>(outer, 1)) * es;
      if (block) std::memcpy(t.bytes.data() + o * block, x.bytes.data() + pos, block);
      pos += block;
    }
  return Error::success();
}

Error evalSlice(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  auto g = sliceGeometry(*c.shapes, x.shape);
  if (!g) return g.takeError();
  auto xs = stridesOf(x.shape);
  int64_t o = 0;
  forEachIndex(c.out[0].shape, [&](const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (size_t i = 0; i < idx.size(); ++i) off += ((*g)[i].start + idx[i] * (*g)[i].step) * xs[i];
    copyElement(c.out[0], o++, x, off);
  });
  if (x.rank() == 0) c.out[0].bytes = x.bytes;
  return Error::success();
}

Error evalGather(EvalCtx& c) {
  const Tensor &x = *c.in[0], &idx = *c.in[1];
  int64_t axis = c.node.getInt("axis", 0);
  if (axis < 0) axis += x.rank();
  int64_t d = x.shape[axis], inner = stridesOf(x.shape)[axis], outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.shape[i];
  int64_t n = idx.numel(), o = 0;
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t k = 0; k < n; ++k) {
      int64_t j = idx.getI(k);
      if (j < -d || j >= d) return c.fail("index " + std::to_string(j) + " is out of range for dim " + std::to_string(d));
      if (j < 0) j += d;
      for (int64_t i = 0; i < inner; ++i) copyElement(c.out[0], o++, x, (a * d + j) * inner + i);
    }
  return Error::success();
}

Error evalGatherElements(EvalCtx& c) {
  const Tensor &x = *c.in[0], &idx = *c.in[1];
  int64_t axis = c.node.getInt("axis", 0);
  if (axis < 0) axis += x.rank();
  auto xs = stridesOf(x.shape);
  int64_t o = 0;
  Error err = Error::success();
  forEachIndex(idx.shape, [&](const std::vector<int64_t>& at) {
    int64_t j = idx.getI(o), d = x.shape[axis], off = 0;
    if (j < -d || j >= d) {
      if (!err) err = c.fail("index " + std::to_string(j) + " is out of range for dim " + std::to_string(d));
      ++o;
      return;
    }
    if (j < 0) j += d;
    for (size_t i = 0; i < at.size(); ++i) {
      int64_t v = (int64_t)i == axis ? j : at[i];
      if (v >= x.shape[i]) {
        if (!err) err = c.fail("indices exceed the data's shape");
        ++o;
        return;
      }
      off += v * xs[i];
    }
    copyElement(c.out[0], o++, x, off);
  });
  return err;
}

Error evalExpand(EvalCtx& c) {
  auto off = broadcastOffsets(c.out[0].shape, c.in[0]->shape);
  for (int64_t i = 0; i < (int64_t)off.size(); ++i) copyElement(c.out[0], i, *c.in[0], off[i]);
  return Error::success();
}

Error evalTile(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  auto xs = stridesOf(x.shape);
  int64_t o = 0;
  forEachIndex(c.out[0].shape, [&](const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (size_t i = 0; i < idx.size(); ++i) off += (idx[i] % x.shape[i]) * xs[i];
    copyElement(c.out[0], o++, x, off);
  });
  return Error::success();
}

Error evalShape(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  int64_t r = x.rank(), n = c.out[0].numel();
  int64_t s = c.node.getInt("start", 0);
  s = std::clamp<int64_t>(s < 0 ? s + r : s, 0, r);
  for (int64_t i = 0; i < n; ++i) c.out[0].setI(i, x.shape[s + i]);
  return Error::success();
}

Error evalSize(EvalCtx& c) {
  c.out[0].setI(0, c.in[0]->numel());
  return Error::success();
}

Error evalConstantOfShape(EvalCtx& c) {
  const Tensor* v = c.node.getTensor("value");
  if (!v) return Error::success(); // zeros, as the result starts
  Tensor& y = c.out[0];
  for (int64_t i = 0, n = y.numel(); i < n; ++i) copyElement(y, i, *v, 0);
  return Error::success();
}

Error evalRange(EvalCtx& c) {
  double start = c.in[0]->getF(0), delta = c.in[2]->getF(0);
  for (int64_t i = 0; i < c.out[0].numel(); ++i) {
    if (isFloat(c.out[0].dtype)) c.out[0].setF(i, start + (double)i * delta);
    else c.out[0].setI(i, c.in[0]->getI(0) + i * c.in[2]->getI(0));
  }
  return Error::success();
}

Error evalTrilu(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  if (x.rank() < 2) return c.fail("input must have rank 2 or more");
  int64_t k = c.present(1) ? c.in[1]->getI(0) : 0;
  bool upper = c.node.getInt("upper", 1);
  int64_t rows = x.shape[x.rank() - 2], cols = x.shape.back();
  c.out[0].bytes = x.bytes;
  size_t size = dtypeSize(x.dtype); // a zero of any dtype is all zero bits
  for (int64_t i = 0, n = x.numel(); i < n; ++i) {
    int64_t col = i % cols, row = (i / cols) % rows;
    bool keep = upper ? col - row >= k : col - row <= k;
    if (!keep) std::memset(c.out[0].bytes.data() + i * size, 0, size);
  }
  return Error::success();
}

Error evalPad(EvalCtx& c) {
  const Tensor& x = *c.in[0];
  Tensor& y = c.out[0];
  auto g = padGeometry(*c.shapes, x.rank());
  if (!g) return g.takeError();
  std::string mode = c.node.getString("mode", "constant");
  for (int64_t d : x.shape)
    if (d == 0 && mode != "constant" && y.numel() > 0) return c.fail("mode '" + mode + "' cannot pad an empty dim");
  Tensor fill(x.dtype, {1});
  if (c.present(2)) copyElement(fill, 0, *c.in[2], 0);
  auto xs = stridesOf(x.shape);
  int64_t o = 0;
  forEachIndex(y.shape, [&](const std::vector<int64_t>& idx) {
    int64_t off = 0;
    bool inside = true;
    for (size_t i = 0; i < idx.size(); ++i) {
      int64_t d = x.shape[i], j = idx[i] - g->begin[i];
      if (j < 0 || j >= d) {
        if (mode == "constant") inside = false;
        else if (mode == "edge") j = std::clamp<int64_t>(j, 0, d - 1);
        else if (mode == "wrap") j = ((j % d) + d) % d;
        else { // reflect, without repeating the edge
          int64_t period = std::max<int64_t>(2 * (d - 1), 1);
          j = ((j % period) + period) % period;
          if (j >= d) j = period - j;
        }
      }
      off += j * xs[i];
    }
    copyElement(y, o++, inside ? x : fill, inside ? off : 0);
  });
  return Error::success();
}

} // namespace sgc::ir
