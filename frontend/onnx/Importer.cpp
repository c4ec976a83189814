// Model-level import: opsets, initializers, graph inputs and outputs, node
// order; then infer-shapes and the verifier.
#include "frontend/onnx/Internal.h"

#include "ir/File.h"
#include "ir/Verifier.h"
#include "ir/passes/InferShapes.h"
#include "ir/shapes/Shapes.h"

#include <filesystem>
#include <map>
#include <set>

namespace sgc::onnx_import {
namespace {

std::string nodeLabel(const onnx::NodeProto& n, size_t index) {
  std::string name = n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name();
  return "node '" + name + "' (" + n.op_type() + ")";
}

/// Symbolic dim names become identifiers of the IR text.
std::string symbolName(const std::string& s) {
  std::string r;
  for (char c : s) r += isalnum((unsigned char)c) || c == '_' ? c : '_';
  if (r.empty() || isdigit((unsigned char)r[0])) r = "d_" + r;
  return r;
}

Expected<ir::Type> valueType(const onnx::ValueInfoProto& vi, const std::string& file) {
  std::string what = file + ": input '" + vi.name() + "'";
  if (!vi.type().has_tensor_type()) return makeError(what + " is not a tensor (sequences, maps and optionals are not supported)");
  const auto& tt = vi.type().tensor_type();
  auto dtype = ir::dtypeFromOnnx(tt.elem_type());
  if (!dtype) return makeError(what + " has unsupported or unknown dtype code " + std::to_string(tt.elem_type()));
  if (!tt.has_shape()) return ir::Type::unranked(*dtype);
  if (tt.shape().dim_size() > ir::kMaxRank) return makeError(what + " has rank " + std::to_string(tt.shape().dim_size()) + ", over " + std::to_string(ir::kMaxRank));
  std::vector<ir::Dim> dims;
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) return makeError(what + " has negative dim " + std::to_string(d.dim_value()));
      if (d.dim_value() > (int64_t(1) << 40)) return makeError(what + " has dim " + std::to_string(d.dim_value()) + ", too large");
      dims.push_back(ir::Dim::of(d.dim_value()));
    } else if (d.has_dim_param() && !d.dim_param().empty()) {
      dims.push_back(ir::Dim::sym(symbolName(d.dim_param())));
    } else {
      dims.push_back(ir::Dim::unknown());
    }
  }
  return ir::Type::ranked_(*dtype, dims);
}

Expected<int> defaultOpset(const onnx::ModelProto& m, const std::string& file) {
  for (const auto& o : m.opset_import()) {
    if (!o.domain().empty() && o.domain() != "ai.onnx") continue;
    if (o.version() < kMinOpset || o.version() > kMaxOpset)
      return makeError(file + ": opset " + std::to_string(o.version()) + " is not supported (sgc reads opsets " +
                       std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + ")");
    return (int)o.version();
  }
  return 0; // no default-domain opset: only nodes of other domains may appear
}

Error addInitializers(ImportCtx& c, const onnx::GraphProto& g) {
  for (const auto& t : g.initializer()) {
    if (c.values.count(t.name())) return makeError(c.file + ": initializer '" + t.name() + "' is defined twice");
    if (t.name().empty()) return makeError(c.file + ": an initializer has no name");
    auto data = decodeTensor(t, c.baseDir, c.file + ": initializer '" + t.name() + "'");
    if (!data) return data.takeError();
    std::string why;
    bool trainable = ir::isFloat(data->dtype) && c.torch.trainable(t.name(), *data, why);
    if (!why.empty()) c.graph.untrainable[t.name()] = why;
    c.values[t.name()] = trainable ? c.graph.addParam(t.name(), std::move(*data)) : c.graph.addConst(t.name(), std::move(*data));
  }
  if (g.sparse_initializer_size()) return makeError(c.file + ": sparse initializers are not supported");
  return Error::success();
}

Error addInputs(ImportCtx& c, const onnx::GraphProto& g) {
  std::set<std::string> listed;
  for (const auto& vi : g.input()) {
    if (!listed.insert(vi.name()).second) return makeError(c.file + ": graph input '" + vi.name() + "' is listed twice");
    if (c.values.count(vi.name())) continue; // an initializer listed as input (IR version < 4): a parameter
    if (vi.name().empty()) return makeError(c.file + ": a graph input has no name");
    auto t = valueType(vi, c.file);
    if (!t) return t.takeError();
    c.values[vi.name()] = c.graph.addInput(vi.name(), *t);
  }
  return Error::success();
}

/// Node indices in a topological order (stable: ONNX order where possible).
Expected<std::vector<size_t>> topoOrder(const ImportCtx& c, const onnx::GraphProto& g) {
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < (size_t)g.node_size(); ++i)
    for (const auto& o : g.node((int)i).output()) {
      if (o.empty()) continue;
      if (c.values.count(o) || !producer.emplace(o, i).second)
        return makeError(c.file + ": " + nodeLabel(g.node((int)i), i) + ": output '" + o + "' is defined twice");
    }
  std::vector<int> state(g.node_size(), 0); // 0 new, 1 visiting, 2 done
  std::vector<size_t> order;
  // Iterative depth-first search: deep graphs must not overflow the stack.
  for (size_t root = 0; root < (size_t)g.node_size(); ++root) {
    if (state[root]) continue;
    std::vector<std::pair<size_t, int>> stack{{root, 0}};
    state[root] = 1;
    while (!stack.empty()) {
      auto& [i, next] = stack.back();
      const auto& n = g.node((int)i);
      if (next < n.input_size()) {
        const std::string& in = n.input(next++);
        if (in.empty() || c.values.count(in)) continue;
        auto it = producer.find(in);
        if (it == producer.end()) return makeError(c.file + ": " + nodeLabel(n, i) + ": input '" + in + "' is not defined");
        if (state[it->second] == 1) return makeError(c.file + ": " + nodeLabel(n, i) + ": the graph has a cycle through input '" + in + "'");
        if (state[it->second] == 0) {
          state[it->second] = 1;
          stack.push_back({it->second, 0});
        }
        continue;
      }
      state[i] = 2;
      order.push_back(i);
      stack.pop_back();
    }
  }
  return order;
}

Expected<std::unique_ptr<ir::Graph>> importGraph(const onnx::ModelProto& m, const std::string& file, const std::string& baseDir) {
  if (!m.has_graph()) return makeError(file + ": the model has no graph");
  auto opset = defaultOpset(m, file);
  if (!opset) return opset.takeError();
  auto graph = std::make_unique<ir::Graph>();
  if (!m.graph().name().empty()) graph->name = m.graph().name();
  ImportCtx c{*graph, file, baseDir, *opset, {}, {}, {}, readTorchExport(m.graph()), {}, 0};
  registerFunctions(c, m);
  if (Error e = importGraphBody(c, m.graph())) return e;
  finishTorchExport(c);
  if (Error e = importTrainingInfo(c, m)) return e;
  if (Error e = ir::verify(*graph)) return makeError(file + ": " + errorText(std::move(e)));
  if (Error e = ir::inferShapes(*graph)) return makeError(file + ": " + errorText(std::move(e)));
  return graph;
}

} // namespace

Error importGraphBody(ImportCtx& c, const onnx::GraphProto& g) {
  if (Error e = addInitializers(c, g)) return e;
  if (Error e = addInputs(c, g)) return e;
  auto order = topoOrder(c, g);
  if (!order) return order.takeError();
  for (size_t i : *order)
    if (Error e = importNode(c, g.node((int)i), i)) return e;
  for (const auto& o : g.output()) {
    auto it = c.values.find(o.name());
    if (it == c.values.end() && c.sequences.count(o.name()))
      return makeError(c.file + ": graph output '" + o.name() + "' is a sequence: sequence outputs are not supported");
    if (it == c.values.end()) return makeError(c.file + ": graph output '" + o.name() + "' is not produced by any node");
    c.graph.outputs.push_back(it->second);
  }
  return Error::success();
}

Expected<std::unique_ptr<ir::Graph>> importModelBytes(const void* data, size_t size, const std::string& name,
                                                      const std::string& baseDir) {
  onnx::ModelProto m;
  if (size > (size_t)INT32_MAX) return makeError(name + ": larger than 2 GiB; store weights as external data");
  if (!m.ParseFromArray(data, (int)size)) return makeError(name + ": not a valid ONNX model (protobuf parsing failed)");
  return importGraph(m, name, baseDir);
}

Expected<std::unique_ptr<ir::Graph>> importModel(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file) return file.takeError();
  std::string dir = std::filesystem::path(path).parent_path().string();
  return importModelBytes(file->data(), file->size(), path, dir.empty() ? "." : dir);
}

} // namespace sgc::onnx_import
