// The compiled program a train.so carries, as the runtime reads it: tensors
// placed in the regions of the arena, the kernel launches of one step in
// order, the updates applied after a step, and where the initial weights
// are. Written by codegen/Package.cpp as JSON; parsed and checked here so a
// corrupt description is an error, never an out-of-bounds access.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sgc::rt {

constexpr int kNumRegions = 6; ///< inputs, params, state, consts, grads, activations
/// Every tensor starts at a multiple of this many bytes in its region (and regions at multiples
/// of 64): the GPU kernels load and store 16 bytes at a time where they can.
constexpr uint64_t kTensorAlignment = 16;

enum class TensorKind : uint8_t { Input, Param, State, Const, Result };

struct TensorDesc {
  std::string name;
  TensorKind kind;
  int region;
  uint64_t offset, bytes;
  std::string dtype; ///< safetensors name: "F32", "I64", ...
  std::vector<int64_t> shape;
  int64_t shards = 1; ///< optimizer state sharded over this many ranks (ZeRO-1): each holds 1/shards
  /// An integer input that indexes (class labels, token ids): the values it may hold, [lo, hi],
  /// and perhaps one more that a loss ignores.
  struct Range {
    int64_t lo, hi;
    std::optional<int64_t> ignore;
  };
  std::optional<Range> range;
  int first = 0, last = -1; ///< live over the schedule's positions [first, last] (none: -1), for pictures of the plan
  /// A parameter's bf16 copy that the optimizer keeps (ir/passes/ShadowWeights.h): the parameter's
  /// id (-1: none). Not a tensor of the ABI (not listed, saved or loaded).
  int shadowOf = -1;
};

/// A matrix product a GPU runs through cuBLASLt: a strided batch of row-major
/// y[b] (m x n) = op(a[b]) (m x k) * op(b[b]) (k x n) (see codegen/kir/LowerOps.h).
struct Gemm {
  int a = -1, b = -1, y = -1; ///< tensor ids
  int64_t m = 0, n = 0, k = 0, batch = 1, strideA = 0, strideB = 0;
  bool transA = false, transB = false;
  std::string dtype; ///< of all three: "F32", "BF16" or "F16"
  /// When set (a tensor of n elements of dtype), the launch's epilogue kernel only adds this bias
  /// to every row of y: cuBLASLt may add it itself (its BIAS epilogue) and the kernel is skipped.
  int bias = -1;
  /// A tanh-approximated GELU of the product plus `bias` (-1: none) that cuBLASLt's epilogue may
  /// compute (codegen/GemmEpilogues.h), into `result`; `aux` (-1: none) is y, which keeps the
  /// product and bias. Launch `skip` (-1: this launch's epilogue kernel) computes `result`
  /// otherwise: a GPU skips it when cuBLASLt has an algorithm for the epilogue.
  struct Gelu {
    int result = -1, aux = -1, bias = -1;
    int64_t skip = -1;
  };
  std::optional<Gelu> gelu;
};

/// A kernel run over `extent` parallel iterations (one call when serial) on its tensors.
struct KernelCall {
  int kernel = -1;
  bool serial = false;
  int64_t extent = 0;
  int64_t vector = 1;    ///< GPU: parallel iterations per thread (threads needed: extent / vector)
  std::vector<int> args; ///< tensor ids, in the kernel's buffer order
  int threads = 256;     ///< GPU: threads per block
  int64_t shared = 0;    ///< GPU: the block's dynamic shared memory, bytes (kir::dynamicSharedBytes)
};

/// A collective over tensors of every rank (see Comm.h): "allreduce" (in place on `tensors`), or
/// from tensors[0] to tensors[1]: "reduce_scatter" (this rank's shard of the sum or mean),
/// "all_gather" (every rank's shard, in rank order), "shard" (this rank's part; local).
struct Collective {
  std::string op = "allreduce";
  bool average = true;      ///< the mean over the ranks, else the sum
  int64_t world = 0;        ///< the ZeRO-1 ones: the world size they were compiled for
  std::vector<int> tensors; ///< tensor ids
};

struct Launch {
  int kernel; ///< -1: no kernel: only `collective`, or only `gpu` (work a GPU alone has)
  bool serial, forward; ///< forward: needed for the loss (eval steps run only these)
  int64_t extent, vector; ///< vector: as in KernelCall
  std::vector<int> args; ///< tensor ids, in the kernel's buffer order
  std::string label;     ///< the ops it computes ("MatMul+Add"), for profiles
  /// On a GPU, when set, the launch is this GEMM followed by `epilogue` (kernel < 0: none).
  std::optional<Gemm> gemm;
  KernelCall epilogue;
  /// On a GPU, when set, these kernels run instead (a form with more parallelism; none: skipped).
  std::optional<std::vector<KernelCall>> gpu;
  /// When set, an all-reduce of these tensors, started after the kernel (if any).
  std::optional<Collective> collective;
  /// A cast of a parameter into its bf16 copy (TensorDesc::shadowOf): not run in a step, but
  /// before one, when the copies may be stale (after sgc_set_tensor or sgc_load, under views).
  bool refresh = false;
  /// On a GPU, the later launches whose work its GPU form runs too ("AdamUpdate x6"), for profiles.
  std::string with{};
  /// Its matrix products' flops where the compiler counts them (a fused attention's), for profiles.
  double flops = 0;
};

/// A decode step over a paged key/value cache (compiled with --mode decode): its sizes, and the
/// tensors the runtime feeds (token ids and positions [tokens, 1]; the cache's block tables
/// i32 [seqs, maxBlocks], each token's sequence and position i32 [tokens]) and reads (logits
/// [tokens, (1,) vocab]); each layer's pool [blocks, 2, blockSize, heads, head dim].
struct Decode {
  int64_t tokens = 0, seqs = 0, blockSize = 0, blocks = 0, maxBlocks = 0, maxContext = 0, vocab = 0;
  int ids = -1, positions = -1, logits = -1, tables = -1, seq = -1, pos = -1; ///< tensor ids (positions: -1 when none)
  int next = -1; ///< each row's next token, i64 [tokens] (-1: a library compiled before it)
  int temperature = -1, topK = -1, topP = -1, seed = -1; ///< each row's sampling inputs, [tokens] (-1: greedy only)
  std::vector<int> pools;
};

struct Program {
  uint32_t abi = 0;
  std::string hash;
  uint64_t alignment = 64;
  uint64_t regions[kNumRegions] = {};
  std::vector<TensorDesc> tensors;
  std::vector<Launch> launches;
  std::vector<std::pair<int, int>> updates; ///< (target, source) copied after a step
  std::vector<std::pair<int, uint64_t>> weights; ///< (tensor, offset in the weights blob)
  int loss = -1, lr = -1, step = -1;
  double lrDefault = 1e-3;
  std::string weightsMode = "embedded"; ///< embedded | external | none
  std::string weightsFile;              ///< for external: the file beside the .so
  int numKernels = 0;
  bool collectives = false; ///< whether some launch is a collective (the library was compiled for data parallelism)
  int64_t world = 0;        ///< the world size ZeRO-1 collectives were compiled for (0: any)
  std::vector<std::string> kernelNames; ///< the GPU modules' function names, by kernel index
  std::optional<Decode> decode;         ///< set for a decode step (then loss, lr and step are -1)
  /// A decode step's token buckets (codegen/DecodeBuckets.h), by ascending tokens, each fewer than
  /// decode->tokens: the same step for fewer rows, of its own tensors (checked to share this
  /// program's parameters and cache) and launches of this program's kernels.
  std::vector<Program> buckets;
};

/// For each launch, the collective launches whose tensors it touches (by bytes, at `address`,
/// each tensor's address by id) and that are the latest such before it: what it must wait for.
std::vector<std::vector<int>> collectiveWaits(const Program& p, const std::vector<uint64_t>& address);

/// Parses and checks the description; `weightsBytes` bounds the weight offsets.
bool parseProgram(const char* json, size_t size, uint64_t weightsBytes, Program& out, std::string& error);

/// The bytes of a program's memory plan: its regions', and its token buckets' own inputs and
/// constants and the activations any needs beyond its own.
uint64_t planBytes(const Program& p);

/// The bytes of the tensors launch `l` reads or writes, each tensor once (for traces and profiles;
/// a kernel that reads a tensor twice, or part of one, moves other amounts). On the CPU: its
/// arguments. On a GPU: its GPU form's calls' where it has one (none where its work runs in an
/// earlier launch's form, codegen/FuseLaunches.h), else its arguments and, for a product, its
/// operands, result and epilogue's.
uint64_t launchTensorBytes(const Program& p, const Launch& l, bool onGpu);

/// The regions' names, in region order (for what describes a plan).
inline constexpr const char* kRegionNames[kNumRegions] = {"inputs", "params", "state", "consts", "grads", "activations"};

/// Where each region starts in a session's arena (in order, each at a multiple of 64 bytes);
/// returns the arena's bytes. With `buckets`, also where each token bucket's regions start: its
/// inputs and constants after all of `p`'s, the rest `p`'s (the activations sized for the largest).
uint64_t regionOffsets(const Program& p, uint64_t offsets[kNumRegions], std::vector<std::array<uint64_t, kNumRegions>>* buckets = nullptr);

} // namespace sgc::rt
