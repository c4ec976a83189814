// sgc inspect: a summary of a model (inputs, outputs, parameters, op
// histogram) or of a safetensors file.
#include "driver/Args.h"
#include "driver/Common.h"

#include <cstdio>
#include <map>

namespace sgc::driver {
namespace {

const CommandSpec kSpec{"inspect", "sgc inspect MODEL.onnx|MODEL.sgcir|FILE.safetensors",
                        "Describes a model (inputs, outputs, parameters with shapes and bytes, op histogram)\n"
                        "or a safetensors file (each tensor's dtype and shape, small tensors' values).",
                        {}};

int64_t bytesOf(const ir::Value* v) { return (int64_t)v->data->bytes.size(); }

void printValues(const char* title, const std::vector<ir::Value*>& vs, bool withBytes) {
  int64_t total = 0, elems = 0;
  for (const ir::Value* v : vs)
    if (withBytes) total += bytesOf(v), elems += v->data->numel();
  printf("%s: %zu", title, vs.size());
  if (withBytes) printf(" (%s elements, %s bytes)", withCommas(elems).c_str(), withCommas(total).c_str());
  printf("\n");
  for (const ir::Value* v : vs) {
    printf("  %-32s %-24s", v->name.c_str(), ir::toString(v->type).c_str());
    if (withBytes) printf(" %14s bytes", withCommas(bytesOf(v)).c_str());
    printf("\n");
  }
}

int inspectModel(const std::string& path) {
  auto g = loadModel(path);
  if (!g) return reportError(g.takeError());
  const ir::Graph& graph = **g;
  printf("model: %s (graph @%s)\n", path.c_str(), graph.name.c_str());
  printValues("inputs", graph.inputs, false);
  printValues("outputs", graph.outputs, false);
  printValues("parameters", graph.params, true);
  printValues("constants", graph.consts, true);
  std::map<std::string, int> hist;
  for (const auto& n : graph.nodes()) hist[std::string(ir::opName(n->op))]++;
  printf("ops: %zu nodes\n", graph.nodes().size());
  for (auto& [op, count] : hist) printf("  %-24s %d\n", op.c_str(), count);
  return 0;
}

int inspectSafetensors(const std::string& path) {
  rt::StFile file;
  std::string error;
  if (!rt::readSafetensors(path, file, error)) return reportError(error);
  printf("safetensors: %s (%zu tensors)\n", path.c_str(), file.size());
  for (auto& [name, st] : file) {
    auto t = fromSafetensors(st, path + ": tensor '" + name + "'");
    if (!t) return reportError(t.takeError());
    printf("  %-32s %-24s", name.c_str(), ir::toString(ir::Type::of(t->dtype, t->shape)).c_str());
    if (t->numel() <= 8) {
      printf(" [");
      for (int64_t i = 0; i < t->numel(); ++i) printf(i ? ", %.6g" : "%.6g", t->getF(i));
      printf("]");
    }
    printf("\n");
  }
  return 0;
}

} // namespace

int inspectMain(int argc, char** argv) {
  int status = 0;
  auto args = parseCommand(kSpec, argc, argv, "one file", status);
  if (!args) return status;
  const std::string& path = args->positional()[0];
  if (path.size() > 12 && path.substr(path.size() - 12) == ".safetensors") return inspectSafetensors(path);
  return inspectModel(path);
}

} // namespace sgc::driver
