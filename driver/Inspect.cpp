// sgc inspect: a summary of a model (inputs, outputs, parameters, op
// histogram) or of a safetensors file.
#include "driver/Args.h"
#include "driver/Common.h"
#include "codegen/Package.h"
#include "driver/CompileCheck.h"
#include "driver/ElfSection.h"
#include "driver/PlanSvg.h"
#include "driver/TrainingFlags.h"
#include "runtime/OutputFile.h"
#include "runtime/Program.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace sgc::driver {
namespace {

const CommandSpec kSpec{"inspect", "sgc inspect MODEL.onnx|MODEL.pt|MODEL.sgcir [--dim N=SIZE,...] | FILE.safetensors | LIB.so [--plan-svg FILE]",
                        "Describes a model (inputs, outputs, parameters with shapes and bytes, op histogram,\n"
                        "and whether it compiles: the nodes of its training step that code generation would\n"
                        "refuse, each with the reason),\n"
                        "a safetensors file (each tensor's dtype and shape, small tensors' values) or a library\n"
                        "compiled by sgc (its memory plan's regions, tensors and launches; for a decoding library\n"
                        "the paged key/value cache: pool, block tables and free list).",
                        {{"dim", "N=SIZE,...", "bind symbolic input dims to sizes for the compile check, as sgc compile --dim"},
                         {"input-type", "NAME=T,...", "a TorchScript forward's argument types, as sgc compile --input-type"},
                         {"plan-svg", "FILE", "for a library: draw its memory plan (each tensor's bytes over its lifetime) as SVG"}}};

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

int inspectModel(const std::string& path, const std::map<std::string, int64_t>& dims, const std::string& inputTypes) {
  auto g = loadModel(path, inputTypes);
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
  return printCompileCheck(path, dims, inputTypes);
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


/// A library is read as a file, never loaded: loading would run its code.
int inspectLibrary(const std::string& path, const std::string& svgPath) {
  auto json = readElfSection(path, codegen::kProgramSection);
  if (!json) return reportError(errorText(json.takeError()) + " (is it a library compiled by this sgc? compile it again)");
  while (!json->empty() && json->back() == '\0') json->pop_back(); // the linker's padding
  rt::Program p;
  std::string error;
  if (!rt::parseProgram(json->data(), json->size(), UINT64_MAX, p, error)) return reportError(path + ": a bad program: " + error);
  printf("library: %s (%s, program hash %s)\n", path.c_str(), p.decode ? "decoding step" : "training step", p.hash.c_str());
  printf("memory plan: %s bytes\n", withCommas((int64_t)rt::planBytes(p)).c_str());
  for (int r = 0; r < rt::kNumRegions; ++r) printf("  %-12s %16s bytes\n", rt::kRegionNames[r], withCommas((int64_t)p.regions[r]).c_str());
  printf("kernels: %d, launches per step: %zu, weights: %s\n", p.numKernels, p.launches.size(), p.weightsMode.c_str());
  if (!svgPath.empty()) {
    if (std::none_of(p.tensors.begin(), p.tensors.end(), [](const rt::TensorDesc& t) { return t.last >= t.first; }))
      return reportError(path + ": its program carries no tensor lifetimes (compiled by an older sgc): compile it again to draw its plan");
    std::string svg = planSvg(p, path.substr(path.find_last_of('/') + 1));
    if (!rt::writeOutput(svgPath, svg.data(), svg.size(), error)) return reportError(error);
    printf("plan picture: %s\n", svgPath.c_str());
  }
  if (!p.decode) return 0;
  const rt::Decode& d = *p.decode;
  uint64_t pool = 0;
  for (int t : d.pools) pool += p.tensors[t].bytes;
  const rt::TensorDesc& first = p.tensors[d.pools[0]];
  printf("paged key/value cache: %zu layers, %lld pages of %lld tokens, %lld sequences of up to %lld tokens (%lld pages), %lld tokens per step, vocabulary %lld\n",
         d.pools.size(), (long long)d.blocks, (long long)d.blockSize, (long long)d.seqs, (long long)d.maxContext, (long long)d.maxBlocks,
         (long long)d.tokens, (long long)d.vocab);
  printf("  page pool     %16s bytes  (state region: %zu x %s [%lld, 2, %lld, %lld, %lld])\n", withCommas((int64_t)pool).c_str(), d.pools.size(),
         first.dtype.c_str(), (long long)first.shape[0], (long long)first.shape[2], (long long)first.shape[3], (long long)first.shape[4]);
  printf("  block tables  %16s bytes  (inputs region: I32 [%lld, %lld])\n", withCommas((int64_t)p.tensors[d.tables].bytes).c_str(), (long long)d.seqs,
         (long long)d.maxBlocks);
  printf("  free list     %16s bytes  (host: a page id and a reference count per page, a length per sequence)\n",
         withCommas(d.blocks * 8 + d.seqs * 4).c_str());
  for (const rt::Program& b : p.buckets)
    printf("token bucket: %lld tokens per step, %zu launches; its own inputs %s bytes and constants %s bytes, activations %s bytes (shared)\n",
           (long long)b.decode->tokens, b.launches.size(), withCommas((int64_t)b.regions[0]).c_str(), withCommas((int64_t)b.regions[3]).c_str(),
           withCommas((int64_t)b.regions[5]).c_str());
  return 0;
}

} // namespace

int inspectMain(int argc, char** argv) {
  int status = 0;
  auto args = parseCommand(kSpec, argc, argv, "one file", status);
  if (!args) return status;
  const std::string& path = args->positional()[0];
  if (path.size() > 12 && path.substr(path.size() - 12) == ".safetensors") return inspectSafetensors(path);
  bool library = path.size() > 3 && path.substr(path.size() - 3) == ".so";
  if (args->has("plan-svg") && !library) return reportError("--plan-svg draws a compiled library's plan: give it LIB.so");
  if (library) return inspectLibrary(path, args->get("plan-svg", ""));
  std::map<std::string, int64_t> dims;
  if (args->has("dim")) {
    auto d = parseDims(args->get("dim"));
    if (!d) return reportError(d.takeError());
    dims = std::move(*d);
  }
  return inspectModel(path, dims, args->get("input-type", ""));
}

} // namespace sgc::driver
