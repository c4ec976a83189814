// What torch.onnx's dynamo exporter records of the program it exported, and
// what sgc makes of it. The exporter writes the torch.export graph signature
// (graph metadata pkg.torch.export.ExportedProgram.graph_signature: which
// graph inputs are the module's parameters, which are buffers, and which
// buffers the module updates) and, per value, the onnxscript optimizer's
// provenance of each initializer it folded (pkg.onnxscript.optimizer.
// folded_from). Debian's libonnx (1.12) predates these metadata fields, so
// they are read from the messages' unknown fields.
//
// With a signature, an initializer is trained only when it is one of the
// module's parameters, or a constant the optimizer folded out of exactly one
// parameter that nothing else was folded from and that it does not repeat
// (a transpose or a slice of it: training the copy trains the parameter the
// way PyTorch would). Buffers and folded constants are constants. A constant
// folded from several parameters, or repeating one, cannot be trained as the
// module trains: it is marked untrainable, and so is the whole graph when
// the module updates buffers (BatchNormalization's running statistics) that
// the graph no longer holds, because the optimizer folded the normalization
// into the convolutions as in inference.
//
// The exporter writes a module's training-mode BatchNormalization as an
// inference-mode node; where the signature says the module updates its
// running statistics, the node is made training-mode again.
#include "frontend/onnx/Internal.h"

#include <google/protobuf/unknown_field_set.h>

#include <set>

namespace sgc::onnx_import {
namespace {

constexpr int kGraphMetadataField = 16;     // GraphProto.metadata_props (onnx >= 1.16)
constexpr int kValueInfoMetadataField = 4;  // ValueInfoProto.metadata_props

/// The (key, value) metadata of a message, from its unknown fields numbered `field`.
std::map<std::string, std::string> metadataOf(const google::protobuf::Message& msg, int field) {
  std::map<std::string, std::string> out;
  const auto& u = msg.GetReflection()->GetUnknownFields(msg);
  for (int i = 0; i < u.field_count(); ++i) {
    const auto& f = u.field(i);
    if (f.number() != field || f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    onnx::StringStringEntryProto e;
    if (e.ParseFromString(f.length_delimited())) out[e.key()] = e.value();
  }
  return out;
}

/// The strings quoted in a Python list repr: "['a', 'b']" -> a, b.
std::vector<std::string> quotedStrings(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\'') continue;
    size_t j = s.find('\'', i + 1);
    if (j == std::string::npos) break;
    out.push_back(s.substr(i + 1, j - i - 1));
    i = j;
  }
  return out;
}

struct Signature {
  std::set<std::string> parameters, buffers, mutated;
};


/// Lines such as "p_m_fc_weight: PARAMETER target='m.fc.weight'" or
/// "getitem_3: BUFFER_MUTATION target='m.bn1.running_mean'".
Signature parseSignature(const std::string& text) {
  Signature s;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    std::string line = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? text.size() : end + 1;
    size_t colon = line.find(": "), target = line.find("target='");
    if (colon == std::string::npos || target == std::string::npos) continue;
    std::string kind = line.substr(colon + 2, line.find(' ', colon + 2) - colon - 2);
    size_t close = line.find('\'', target + 8);
    std::string name = line.substr(target + 8, close - target - 8);
    if (kind == "PARAMETER") s.parameters.insert(name);
    else if (kind == "BUFFER") s.buffers.insert(name);
    else if (kind == "BUFFER_MUTATION") s.mutated.insert(name);
  }
  return s;
}

/// Whether `t` repeats itself along some axis of length > 1 (all its slices there equal, bit
/// for bit): a broadcast copy, which training would turn into independent copies.
bool repeats(const ir::Tensor& t) {
  size_t esize = ir::dtypeSize(t.dtype);
  int64_t inner = 1;
  for (int64_t a = t.rank() - 1; a >= 0; --a) {
    int64_t d = t.shape[a], outer = t.numel() / std::max<int64_t>(d * inner, 1);
    bool same = d > 1;
    for (int64_t o = 0; o < outer && same; ++o)
      for (int64_t k = 1; k < d && same; ++k)
        same = std::equal(t.bytes.begin() + ((o * d + k) * inner) * esize, t.bytes.begin() + ((o * d + k + 1) * inner) * esize,
                          t.bytes.begin() + (o * d * inner) * esize);
    if (same) return true;
    inner *= d;
  }
  return false;
}

std::string list(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

} // namespace

TorchExport readTorchExport(const onnx::GraphProto& g) {
  TorchExport t;
  auto meta = metadataOf(g, kGraphMetadataField);
  auto sig = meta.find("pkg.torch.export.ExportedProgram.graph_signature");
  if (sig == meta.end()) return t;
  t.present = true;
  Signature s = parseSignature(sig->second);
  t.parameters = s.parameters, t.mutated = s.mutated;
  for (const auto& vi : g.value_info()) {
    auto m = metadataOf(vi, kValueInfoMetadataField);
    auto f = m.find("pkg.onnxscript.optimizer.folded_from");
    if (f == m.end()) continue;
    t.optimized = true;
    for (const auto& src : quotedStrings(f->second))
      if (s.parameters.count(src)) t.folded[vi.name()].push_back(src);
  }
  for (const auto& init : g.initializer()) {
    if (s.parameters.count(init.name())) ++t.uses[init.name()];
    auto f = t.folded.find(init.name());
    if (f != t.folded.end())
      for (const auto& p : f->second) ++t.uses[p];
  }
  for (const auto& init : g.initializer()) t.held.insert(init.name());
  return t;
}

bool TorchExport::trainable(const std::string& name, const ir::Tensor& data, std::string& why) const {
  why.clear();
  if (!present || parameters.count(name) || mutated.count(name)) return true; // BN statistics: updated, never trained
  auto it = folded.find(name);
  if (it == folded.end()) return false; // a buffer, or a constant folded from no parameter
  const auto& from = it->second;
  if (from.size() > 1) why = "folded from the parameters " + list(from) + " into one tensor";
  else if (uses.at(from[0]) > 1) why = "one of several tensors folded from the parameter " + from[0];
  else if (repeats(data)) why = "a repeated copy of the parameter " + from[0];
  else return true; // a transposed or sliced copy of one parameter: trained as it
  why += " by torch.onnx's optimizer; export with optimize=False to train it as the module trains";
  return false;
}

/// At most `most` names of `v`, and how many there are.
std::string someOf(const std::vector<std::string>& v, size_t most = 4) {
  std::vector<std::string> head(v.begin(), v.begin() + std::min(most, v.size()));
  return list(head) + (v.size() > most ? " and " + std::to_string(v.size() - most) + " more" : "");
}

void finishTorchExport(ImportCtx& c) {
  if (!c.torch.present) return;
  auto endsWith = [](const std::string& s, const std::string& e) { return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0; };
  // BatchNormalization's running statistics that the graph lost (its num_batches_tracked only
  // counts steps: an exported graph never holds it).
  std::vector<std::string> lostStats, lostParams;
  for (const auto& b : c.torch.mutated)
    if (!c.torch.held.count(b) && (endsWith(b, ".running_mean") || endsWith(b, ".running_var"))) lostStats.push_back(b);
  // Parameters neither held nor folded into a held constant: the optimizer merged them with
  // equal-valued initializers (a fresh model's LayerNorm weights and zero biases) or folded them away.
  // Without the optimizer a parameter missing from the graph is one tied to another (GPT-2's
  // embedding and head), which the graph holds once.
  for (const auto& p : c.torch.parameters)
    if (c.torch.optimized && !c.torch.held.count(p) && !c.torch.uses.count(p)) lostParams.push_back(p);
  std::string fix = "; export with optimize=False (or dynamo=False, training=TrainingMode.TRAINING) to train it";
  if (!lostStats.empty())
    c.graph.notTrainable = "the module updates running statistics the graph does not hold (" + someOf(lostStats) +
                           "): torch.onnx's optimizer folded its BatchNormalization into the convolutions as in inference" + fix;
  else if (!lostParams.empty())
    c.graph.notTrainable = "the module's parameters " + someOf(lostParams) +
                           " are not in the graph: torch.onnx's optimizer merged them with equal-valued initializers or "
                           "folded them into constants, so training would tie or freeze them" + fix;
  for (auto& n : c.graph.nodes())
    if (n->op == ir::Op::BatchNormalization && !n->getInt("training_mode", 0) && n->input(3) && c.torch.mutated.count(n->input(3)->name))
      n->attrs["training_mode"] = int64_t(1);
}

} // namespace sgc::onnx_import
