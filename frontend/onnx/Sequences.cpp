// ONNX sequence ops, resolved at import: sgc's IR has tensors only, so a
// sequence whose length and positions are known when the model is read (as
// exporters write them to split and unbind tensors) is kept as a list of
// tensor values, and each sequence op becomes plain tensor ops on that list
// (SplitToSequence a Split, ConcatFromSequence a Concat, SequenceAt a
// lookup). A length or position that depends on the data is an error naming
// the node.
#include "frontend/onnx/Build.h"

#include "ir/passes/InferShapes.h"

namespace sgc::onnx_import {
namespace {

using ir::Op;

Expected<std::vector<ir::Value*>*> sequence(ImportCtx& c, const onnx::NodeProto& n, int i) {
  auto it = i < n.input_size() ? c.sequences.find(n.input(i)) : c.sequences.end();
  if (it == c.sequences.end()) return c.fail("input " + std::to_string(i) + " is not a sequence defined before it");
  return &it->second;
}

Expected<std::vector<int64_t>> constInts(ImportCtx& c, const onnx::NodeProto& n, int i, const std::string& what) {
  auto v = inputOf(c, n, i);
  if (!v) return v.takeError();
  if (!*v || (*v)->kind != ir::ValueKind::Const || ir::isFloat((*v)->data->dtype))
    return c.fail(what + " that is not an integer constant is not supported (sequences are resolved when the model is read)");
  return (*v)->data->toI64();
}

/// A position in a sequence of `size` elements (negative: from the end); `end` allows `size`.
Expected<size_t> position(ImportCtx& c, const onnx::NodeProto& n, int i, size_t size, bool end) {
  auto p = constInts(c, n, i, "the position");
  if (!p) return p.takeError();
  if (p->size() != 1) return c.fail("the position must be a scalar");
  int64_t v = (*p)[0] < 0 ? (*p)[0] + (int64_t)size : (*p)[0];
  if (v < 0 || v > (int64_t)size - (end ? 0 : 1))
    return c.fail("position " + std::to_string((*p)[0]) + " is outside a sequence of " + std::to_string(size));
  return (size_t)v;
}

/// The static size of `v`'s dim `axis`, from the shapes of the graph read so far.
Expected<int64_t> dimOf(ImportCtx& c, ir::Value* v, int64_t& axis) {
  if (!v->type.isStatic()) // folds shape computations: positions and shapes known now stay known
    if (Error e = ir::inferShapes(c.graph)) return e;
  if (!v->type.ranked) return c.fail("the rank of %" + v->name + " is not known when the model is read");
  int64_t r = v->type.rank();
  if (axis < -r || axis >= r) return c.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
  if (axis < 0) axis += r;
  const ir::Dim& d = v->type.dims[axis];
  if (!d.isStatic()) return c.fail("dim " + std::to_string(axis) + " of %" + v->name + " is not static");
  return d.value;
}

std::string outName(const onnx::NodeProto& n, const std::string& name, size_t i) { return name + "/" + n.output(0) + "_" + std::to_string(i); }

/// SplitToSequence(input, split?) {axis, keepdims}: a Split into the listed lengths, into
/// chunks of a scalar length, or into pieces of 1 (squeezed away unless keepdims).
Error splitToSequence(ImportCtx& c, const onnx::NodeProto& n, const std::string& name) {
  auto x = inputOf(c, n, 0);
  if (!x) return x.takeError();
  if (!*x) return c.fail("input 0 is missing");
  int64_t axis = intAttr(n, "axis", 0);
  bool given = n.input_size() > 1 && !n.input(1).empty();
  std::vector<int64_t> split;
  bool scalarSplit = false;
  if (given) {
    auto s = constInts(c, n, 1, "split");
    if (!s) return s.takeError();
    split = *s;
    scalarSplit = c.values.at(n.input(1))->data->rank() == 0;
  }
  if (!given || scalarSplit) {
    auto d = dimOf(c, *x, axis);
    if (!d) return d.takeError();
    int64_t chunk = given ? split[0] : 1;
    if (chunk <= 0) return c.fail("split must be positive");
    split.clear();
    for (int64_t at = 0; at < *d; at += chunk) split.push_back(std::min(chunk, *d - at));
  }
  if (split.empty()) return c.fail("an empty sequence is not supported");
  ir::Value* sizes = c.graph.addConst(c.graph.uniqueName(name + "/split"), ir::Tensor::fromI64(ir::DType::I64, {(int64_t)split.size()}, split));
  std::vector<std::string> outs;
  for (size_t i = 0; i < split.size(); ++i) outs.push_back(outName(n, name, i));
  ir::Node* s = c.graph.addNode(Op::Split, {*x, sizes}, (int)split.size(), name, outs);
  s->attrs["axis"] = ir::Attr(axis);
  std::vector<ir::Value*> seq(s->outputs.begin(), s->outputs.end());
  if (!given && !intAttr(n, "keepdims", 1)) {
    ir::Value* axes = c.graph.addConst(c.graph.uniqueName(name + "/axes"), ir::Tensor::fromI64(ir::DType::I64, {1}, {axis}));
    for (auto& v : seq) v = c.graph.addNode(Op::Squeeze, {v, axes}, 1, name + "/squeeze")->outputs[0];
  }
  c.sequences[n.output(0)] = std::move(seq);
  return Error::success();
}

/// ConcatFromSequence(seq) {axis, new_axis}: a Concat, of the elements unsqueezed at axis when new_axis.
Error concatFromSequence(ImportCtx& c, const onnx::NodeProto& n, const std::string& name) {
  auto seq = sequence(c, n, 0);
  if (!seq) return seq.takeError();
  if ((*seq)->empty()) return c.fail("the sequence is empty");
  int64_t axis = intAttr(n, "axis", 0);
  std::vector<ir::Value*> parts = **seq;
  if (intAttr(n, "new_axis", 0)) {
    ir::Value* axes = c.graph.addConst(c.graph.uniqueName(name + "/axes"), ir::Tensor::fromI64(ir::DType::I64, {1}, {axis}));
    for (auto& v : parts) v = c.graph.addNode(Op::Unsqueeze, {v, axes}, 1, name + "/unsqueeze")->outputs[0];
  }
  ir::Node* cat = c.graph.addNode(Op::Concat, parts, 1, name, {n.output(0)});
  cat->attrs["axis"] = ir::Attr(axis);
  c.values[n.output(0)] = cat->outputs[0];
  return Error::success();
}

Error sequenceConstruct(ImportCtx& c, const onnx::NodeProto& n) {
  std::vector<ir::Value*> seq;
  for (int i = 0; i < n.input_size(); ++i) {
    auto v = inputOf(c, n, i);
    if (!v) return v.takeError();
    if (!*v) return c.fail("input " + std::to_string(i) + " is missing");
    seq.push_back(*v);
  }
  c.sequences[n.output(0)] = std::move(seq);
  return Error::success();
}

/// SequenceInsert(seq, tensor, position?) and SequenceErase(seq, position?): a new list.
Error sequenceEdit(ImportCtx& c, const onnx::NodeProto& n, bool insert) {
  auto seq = sequence(c, n, 0);
  if (!seq) return seq.takeError();
  std::vector<ir::Value*> out = **seq;
  int posInput = insert ? 2 : 1;
  size_t at = insert ? out.size() : out.size() - 1;
  if (!insert && out.empty()) return c.fail("erasing from an empty sequence");
  if (n.input_size() > posInput && !n.input(posInput).empty()) {
    auto p = position(c, n, posInput, out.size(), insert);
    if (!p) return p.takeError();
    at = *p;
  }
  if (insert) {
    auto v = inputOf(c, n, 1);
    if (!v) return v.takeError();
    if (!*v) return c.fail("input 1 is missing");
    out.insert(out.begin() + (ptrdiff_t)at, *v);
  } else {
    out.erase(out.begin() + (ptrdiff_t)at);
  }
  c.sequences[n.output(0)] = std::move(out);
  return Error::success();
}

Error sequenceAt(ImportCtx& c, const onnx::NodeProto& n, const std::string& name) {
  auto seq = sequence(c, n, 0);
  if (!seq) return seq.takeError();
  auto p = position(c, n, 1, (*seq)->size(), false);
  if (!p) return p.takeError();
  // An Identity, so that the result carries the node's output name.
  c.values[n.output(0)] = c.graph.addNode(Op::Identity, {(**seq)[*p]}, 1, name, {n.output(0)})->outputs[0];
  return Error::success();
}

} // namespace

bool isSequenceOp(const onnx::NodeProto& n) {
  static const char* ops[] = {"SplitToSequence", "ConcatFromSequence", "SequenceConstruct", "SequenceEmpty", "SequenceInsert",
                              "SequenceErase", "SequenceAt", "SequenceLength"};
  if (!n.domain().empty() && n.domain() != "ai.onnx") return false;
  for (const char* op : ops)
    if (n.op_type() == op) return true;
  return false;
}

Error importSequenceOp(ImportCtx& c, const onnx::NodeProto& n, const std::string& name) {
  if (n.output_size() != 1 || n.output(0).empty()) return c.fail("expected one output");
  if (c.graph.findValue(n.output(0)) || c.sequences.count(n.output(0))) return c.fail("output '" + n.output(0) + "' is defined twice");
  const std::string& op = n.op_type();
  if (op == "SplitToSequence") return splitToSequence(c, n, name);
  if (op == "ConcatFromSequence") return concatFromSequence(c, n, name);
  if (op == "SequenceConstruct") return sequenceConstruct(c, n);
  if (op == "SequenceEmpty") return (c.sequences[n.output(0)] = {}, Error::success());
  if (op == "SequenceInsert") return sequenceEdit(c, n, true);
  if (op == "SequenceErase") return sequenceEdit(c, n, false);
  if (op == "SequenceAt") return sequenceAt(c, n, name);
  auto seq = sequence(c, n, 0); // SequenceLength
  if (!seq) return seq.takeError();
  c.values[n.output(0)] = c.graph.addConst(n.output(0), ir::Tensor::scalarI64((int64_t)(*seq)->size()));
  return Error::success();
}

} // namespace sgc::onnx_import
