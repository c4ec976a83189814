// From a training-step graph to everything a train.so carries: the kernel
// schedule (chains of elementwise nodes fused into one kernel, every other
// node lowered by itself), the static memory plan over that schedule, the
// kernels, the launch table, the initial weights, and the content hash.
//
// Requires: static shapes; a graph with a loss output (buildTrainingStep).
#pragma once
#include "codegen/MemoryPlan.h"
#include "codegen/kir/Kernel.h"
#include "codegen/kir/LowerOps.h"
#include "ir/Error.h"
#include "ir/Graph.h"

#include <set>
#include <string>
#include <vector>

namespace sgc::codegen {

struct CompiledProgram {
  std::vector<std::vector<const ir::Node*>> schedule; ///< nodes of each kernel group, in order
  MemoryPlan plan;
  std::vector<kir::Kernel> kernels;
  std::string programJson;      ///< what runtime/Program.h parses
  std::vector<uint8_t> weights; ///< constants, and the initial parameters when embedded
  std::string hash;             ///< hex BLAKE3 hash of the graph, the options and the versions
  int64_t bytesPerStep = 0;     ///< bytes the kernels read and write in one step
  int64_t shadowCasts = 0;      ///< weights' bf16 casts run only when their copies are stale (ShadowWeights.h)
  int64_t gemms = 0;            ///< products a GPU runs through the GEMM library
  int64_t gemmEpilogues = 0;    ///< of those, followed by an epilogue kernel (GPU only)
  int64_t gpuForms = 0;         ///< nodes a GPU runs as other kernels (kir::lowerForGpu)
  int64_t absorbedTransposes = 0; ///< transposes a GPU skips (GemmTransposes.h)
  int64_t gemmGelus = 0;        ///< GELUs cuBLASLt's epilogues compute (GemmEpilogues.h)
  int64_t launches = 0;         ///< kernel launches and collectives of a CPU step
  int64_t gpuLaunches = 0;      ///< those of a GPU step (kernels and GEMM calls: its forms, runs and no-ops differ)
  int64_t fusedLaunches = 0;    ///< of those, small ones a GPU runs together (FuseLaunches.h)
  int64_t horizontalLaunches = 0; ///< the launches it runs them as
  int64_t zeroings = 0;         ///< accumulators' zeroings a GPU runs together (FuseLaunches.h, ZeroRun)
  int64_t zeroLaunches = 0;     ///< the launches it runs them as
  int64_t joinedCalls = 0;      ///< GPU forms' calls a GPU runs together (FuseLaunches.h, CallRun)
  int64_t callRuns = 0;         ///< the horizontal kernels it runs them as
};

/// The kernel schedule. Elementwise nodes of one shape become one kernel when
/// one reads what another computes, or both read the same tensor of that
/// shape: a node joins the latest such kernel at which its inputs are ready
/// (it may run earlier than its place in the graph), and the kernel stores
/// each result read outside it. A product takes the elementwise nodes right
/// after it as its epilogue, a row op (kir::isRowOp) the kernels around it
/// (mergeRowGroups); every other node is its own.
std::vector<std::vector<const ir::Node*>> kernelSchedule(const ir::Graph& g);

/// The results computed and read only inside one elementwise kernel of
/// `schedule`: the kernel keeps them in registers, the plan gives them no bytes.
std::set<const ir::Value*> groupInternals(const ir::Graph& g, const std::vector<std::vector<const ir::Node*>>& schedule);

/// Fuses, plans and lowers `g`. `options` is folded into the hash (the flags
/// that shaped the graph).
/// Where a train.so's parameters come from: embedded in it, a safetensors file
/// beside it (`weightsFile`), or none (the host loads them through the ABI).
enum class Weights { Embedded, External, None };

/// A decode step over a paged key/value cache (ir/passes/PagedKv.h): what the runtime needs to
/// feed it and keep its pages.
struct DecodeSpec {
  int64_t tokens = 0, seqs = 0, blockSize = 0, blocks = 0, maxBlocks = 0, maxContext = 0;
  std::string ids, positions; ///< the model's token and position inputs (positions: "" when none)
  std::string next;           ///< the output of each row's next token (Sample of its logits, fed sgc.sample.*)
  std::vector<std::string> pools; ///< each layer's cache
};

/// What the GPU targets named by `options` (sgc compile's canonical flags: --target=LIST, cpu and
/// sm_90 when absent) have in common.
kir::GpuArch gpuArchOf(const std::string& options);

/// `defaultLr` is the learning rate a session starts with. With `decode`, `g` is a decode step
/// (its one output: the logits) instead of a training step.
Expected<CompiledProgram> buildProgram(const ir::Graph& g, const std::string& options, double defaultLr = 1e-3,
                                       Weights weights = Weights::Embedded, const std::string& weightsFile = "",
                                       const DecodeSpec* decode = nullptr);

/// Kernels, launches and bytes moved per step, as `sgc compile --stats` prints them.
std::string programStats(const CompiledProgram& p);

/// The kernel schedule, one group (a kernel, or a GEMM and its epilogue) and its nodes a line each,
/// as `sgc compile --emit=kernels` prints it.
std::string printSchedule(const CompiledProgram& p);

} // namespace sgc::codegen
