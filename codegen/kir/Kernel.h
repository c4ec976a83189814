// The kernel IR: what one compiled kernel computes, as loop nests over flat
// buffers, written once and lowered by LLVM to x86-64 and to NVPTX.
//
// A kernel takes buffers (element dtype and count; read or written) and runs
// a statement tree: loops (the outermost may be parallel: threads on the CPU,
// the grid on the GPU), scalar locals, and stores; GPU-only kernels also have
// warp operations (reductions, tensor-core products) and a block's shared
// memory (arrays filled by asynchronous copies, barriers). Expressions compute on
// three scalar types (f32 for f32/f16/bf16 buffers, f64, i64; i1 for bool);
// loads convert from the buffer's dtype and stores convert back.
#pragma once
#include "ir/DType.h"

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace sgc::kir {

enum class Scalar : uint8_t { F32, F64, I64, I1 };
/// The compute type of a buffer dtype (f16/bf16 compute in f32).
Scalar computeType(ir::DType t);
const char* scalarName(Scalar s);
/// The type long sums of `t` accumulate in: f64 for f32 (and the narrow floats computed in f32),
/// so that rounding grows with the terms' precision rather than their count; `t` otherwise.
inline Scalar accumulatorType(Scalar t) { return t == Scalar::F32 ? Scalar::F64 : t; }

struct Expr;
using ExprRef = std::shared_ptr<const Expr>;

enum class ExprKind : uint8_t { Const, LoopVar, Local, Load, SharedLoad, Unary, Binary, Select, Cast, WarpReduce };

/// The scalar operations (KirOps.def says what each computes).
enum class KOp : uint8_t {
#define KOP(N, ...) N,
#include "codegen/kir/KirOps.def"
};
const char* kopName(KOp op);
int kopArity(KOp op);

struct Expr {
  ExprKind kind;
  Scalar type;
  double value = 0;   ///< Const (f32, f64, i1)
  int64_t bits = 0;   ///< Const of type i64: exact; WarpReduce: its lanes
  int id = 0;         ///< LoopVar, Local: its number; Load: the buffer; SharedLoad: the shared array; WarpReduce: its stride
  KOp op = KOp::Add;  ///< Unary, Binary, WarpReduce
  std::vector<ExprRef> args;
};

ExprRef constant(double v, Scalar t);
ExprRef constantI64(int64_t v); ///< any 64-bit pattern, exactly
ExprRef loopVar(int id);
ExprRef local(int id, Scalar t);
ExprRef load(int buffer, ExprRef index, Scalar t);
/// Element `index` of the kernel's shared array `array` (see Kernel::shared), as load does.
ExprRef sharedLoad(int array, ExprRef index, Scalar t);
/// A one-operand KOp (its Arity is 1).
ExprRef unary(KOp op, ExprRef a);
/// A two-operand KOp of operands of one type (comparisons give i1).
ExprRef binary(KOp op, ExprRef a, ExprRef b);
ExprRef select(ExprRef cond, ExprRef a, ExprRef b);
/// Add or Max of an f32 over the 32 lanes of a GPU warp (32 consecutive parallel iterations,
/// aligned): every lane gets the result. Only in gpuOnly kernels whose parallel extent is a
/// multiple of 32, so that whole warps run every iteration together. With `lanes` (a power of
/// two below 32), over each aligned group of that many lanes instead; with `stride` (a power of
/// two, lanes * stride <= 32) too, over the lanes `stride` apart in each aligned group of
/// lanes * stride (lanes whose index differs in those bits only).
ExprRef warpReduce(KOp op, ExprRef a, int lanes = 32, int stride = 1);
ExprRef cast(ExprRef a, Scalar t);

// Kernel code reads as the math it builds (as Halide's IROperator.h): arithmetic operators on
// expressions, a plain number taking the other operand's scalar type, and named functions.
ExprRef operator+(ExprRef a, ExprRef b);
ExprRef operator-(ExprRef a, ExprRef b);
ExprRef operator*(ExprRef a, ExprRef b);
ExprRef operator/(ExprRef a, ExprRef b);
ExprRef operator-(ExprRef a);
ExprRef operator+(ExprRef a, double b);
ExprRef operator-(ExprRef a, double b);
ExprRef operator*(ExprRef a, double b);
ExprRef operator/(ExprRef a, double b);
ExprRef operator+(double a, ExprRef b);
ExprRef operator-(double a, ExprRef b);
ExprRef operator*(double a, ExprRef b);
ExprRef operator/(double a, ExprRef b);
ExprRef exp(ExprRef x);
ExprRef exp2(ExprRef x);
ExprRef expm1(ExprRef x);
ExprRef log(ExprRef x);
ExprRef log1p(ExprRef x);
ExprRef sqrt(ExprRef x);
ExprRef tanh(ExprRef x);
ExprRef erf(ExprRef x);
ExprRef sin(ExprRef x);
ExprRef cos(ExprRef x);
ExprRef atan(ExprRef x);
ExprRef abs(ExprRef x);
ExprRef floor(ExprRef x);
ExprRef ceil(ExprRef x);
ExprRef min(ExprRef a, ExprRef b);
ExprRef max(ExprRef a, ExprRef b);
ExprRef min(ExprRef a, double b);
ExprRef max(ExprRef a, double b);
ExprRef pow(ExprRef a, ExprRef b);
ExprRef eq(ExprRef a, ExprRef b);
ExprRef ne(ExprRef a, ExprRef b);
ExprRef lt(ExprRef a, ExprRef b);
ExprRef le(ExprRef a, ExprRef b);
ExprRef gt(ExprRef a, ExprRef b);
ExprRef ge(ExprRef a, ExprRef b);
ExprRef eq(ExprRef a, double b);
ExprRef lt(ExprRef a, double b);
ExprRef le(ExprRef a, double b);
ExprRef gt(ExprRef a, double b);
ExprRef ge(ExprRef a, double b);
/// A constant of `like`'s scalar type.
ExprRef constantLike(const ExprRef& like, double v);

struct Stmt;
using StmtRef = std::shared_ptr<Stmt>;

enum class StmtKind : uint8_t {
  Loop, Store, AtomicAdd, Let, Set, Block, Mma, CopyAsync, AsyncCommit, AsyncWait, Barrier, SharedStore,
  Wgmma, WgmmaFence, WgmmaCommit, WgmmaWait, FenceProxyAsync, BulkStore, BulkCommit, BulkWait, BulkReadWait
};

/// A warpgroup product's operand in shared memory (Hopper's wgmma reads it there itself): a tile
/// of `rows` rows of bf16 elements in the 128-byte swizzled layout that wgmma and its descriptors
/// name (see wgmmaTileOffset), from byte `offset` (an i64 expression) of shared array `array`.
/// K-major: the tile's rows are the product's rows (A) or columns (B), its width the contracted
/// dim. MN-major (`mnMajor`): its rows are the contracted dim, its width A's rows or B's columns
/// (wgmma's transposed operand, bf16 only).
struct WgmmaTile {
  int array = 0;
  ExprRef offset;       ///< bytes, at the product's first contracted element
  int64_t rows = 0;     ///< the whole tile's rows (the stride of its 64-column blocks is rows * 128 bytes)
  bool mnMajor = false;
};

/// The byte offset of element (row, col) of a tile of `rows` rows in wgmma's 128-byte swizzled
/// layout: 64-column blocks one after another, each `rows` rows of 128 bytes, the 16-byte chunks
/// of row r permuted by chunk ^ (r mod 8) (so that 8 rows' chunk c lie in 8 different bank groups).
/// The tile must start 1024-byte aligned (SharedArray::align), as the swizzle is of the address.
ExprRef wgmmaTileOffset(const ExprRef& row, const ExprRef& col, int64_t rows);

struct Stmt {
  StmtKind kind;
  int id = 0;                  ///< Loop: its variable; Let/Set: the local; Store: the buffer; CopyAsync, SharedStore, BulkStore: the shared array
  int buffer = 0;              ///< CopyAsync: the buffer copied from; BulkStore: the buffer copied into
  int64_t extent = 0;          ///< Loop: iterations [0, extent); AsyncWait, WgmmaWait, BulkWait, BulkReadWait: the groups left in flight; CopyAsync,
                               ///< BulkStore: its bytes; Wgmma: 1 when it adds to the accumulators, 0 when it replaces them
  bool parallel = false;       ///< Loop: iterations are independent; when its body is stores only, an
                               ///< iteration computes all their values before it stores any
  bool bf16 = false;           ///< Let: the local (f32) holds its values rounded to bf16 (letBf16)
  ExprRef index, value;        ///< Store: buffer[index] = value (SharedStore: shared[index]); AtomicAdd: += value; Let/Set: local = value;
                               ///< CopyAsync: shared[index...] = buffer[value...]; BulkStore: buffer[value...] = shared[index...];
                               ///< Loop (serial): when set, an i64 bound: iterations [0, min(extent, value))
  std::vector<StmtRef> body;   ///< Loop, Block
  std::vector<ExprRef> operands; ///< Mma: a0..a7, b0..b3; Wgmma: its warp's A fragment a0..a7 (none when A is a tile);
                                 ///< SharedStore of a pair (sharedStorePair): the second value
  std::vector<int> acc;          ///< Mma: the four f32 locals c0..c3, updated in place; Wgmma: its n / 2 f32 accumulators, likewise;
                                 ///< WgmmaWait: the accumulators of the products it waits for
  std::vector<WgmmaTile> tiles;  ///< Wgmma: B, then A when A is a tile
};

StmtRef loop(int var, int64_t extent, bool parallel, std::vector<StmtRef> body);
/// A serial loop that also stops at `bound` (an i64 expression of enclosing loop variables and
/// locals): iterations [0, min(extent, bound)). A causal mask's triangle, say.
StmtRef loopUpTo(int var, int64_t extent, ExprRef bound, std::vector<StmtRef> body);
StmtRef store(int buffer, ExprRef index, ExprRef value);
/// buffer[index] += value as one atomic operation (f32 and f64 buffers): partial results of
/// parallel iterations meet in one element. The order of the adds is not fixed.
StmtRef atomicAdd(int buffer, ExprRef index, ExprRef value);
StmtRef let(int local, ExprRef value);
/// let, for an f32 local that holds its values (this one and every later set's) rounded to bf16:
/// half a register each on a GPU, and as an mma operand passed on as it is (a tensor-core
/// kernel's operand rows held across its walk).
StmtRef letBf16(int local, ExprRef value);
StmtRef set(int local, ExprRef value);
StmtRef block(std::vector<StmtRef> body);
/// One warp-wide tensor-core product D = A B + C of a 16x16 A by a 16x8 B (PTX
/// mma.m16n8k16.row.col, bf16 operands, f32 accumulation), C and D the f32 locals `acc`. Each
/// lane (parallel iteration mod 32; g = lane / 4, t = lane % 4) gives its part of the operands,
/// rounded to bf16 (a bf16 load is passed on as it is):
///   a[0..7]: A[g][2t], A[g][2t+1], A[g+8][2t], A[g+8][2t+1], and the same at columns +8;
///   b[0..3]: B[2t][g], B[2t+1][g], B[2t+8][g], B[2t+9][g];
///   acc[0..3]: C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1].
/// Only in gpuOnly kernels, under the same whole-warp rule as warpReduce.
StmtRef mmaBf16(std::vector<int> acc, std::vector<ExprRef> a, std::vector<ExprRef> b);

/// The shared memory of a GPU block (the `threads` parallel iterations of one block; see
/// Kernel::threads): the copies of a tile that the block's warps all read. Shared arrays, their
/// copies and barriers are for gpuOnly kernels whose parallel extent is a multiple of `threads`,
/// so that every thread of a block runs every iteration (and reaches every barrier) together.
///
/// copyAsync starts a copy of `bytes` bytes (4, 8 or 16: neighbouring elements, from an index of
/// `buffer` and into one of `array`, both aligned to that size) that runs behind the statements
/// after it (cp.async). asyncCommit() closes the copies this thread started since the last one
/// into a group; asyncWait(n) waits until at most n of the thread's groups are in flight;
/// barrier() then waits for every thread of the block, after which each thread sees the copies
/// all of them waited for. A pipeline: copy tile 0, commit; then for
/// each j: copy tile j + 1, commit, asyncWait(1) (tile j has arrived), barrier, compute on
/// tile j, barrier (nobody reads it any more).
StmtRef copyAsync(int array, ExprRef sharedIndex, int buffer, ExprRef index, int bytes = 16);
StmtRef asyncCommit();
StmtRef asyncWait(int inFlight);
StmtRef barrier();
/// shared[index] = value, seen by the block's other threads after a barrier (a block-wide
/// reduction's partial results, one a warp). An array of bf16 holds the value rounded to bf16.
StmtRef sharedStore(int array, ExprRef index, ExprRef value);
/// shared[index] = lo and shared[index + 1] = hi, both rounded to bf16, as one 4-byte store into
/// a bf16 array (index even): a tensor core result fragment's neighbouring pair.
StmtRef sharedStorePair(int array, ExprRef index, ExprRef lo, ExprRef hi);

/// Hopper's warpgroup products (PTX wgmma, sm_90a), for gpuOnly kernels whose blocks are whole
/// warpgroups (4 warps, `threads` a multiple of 128) that all run each product together.
/// wgmmaBf16 starts D = A B + D for a 64 x 16 A and a 16 x n B (n = 2 acc.size(), a multiple of 8
/// up to 256), bf16 operands, f32 accumulators: warp w of the warpgroup holds D's rows 16w..16w+15,
/// lane (g = lane / 4, t = lane % 4) the elements acc[4j..4j+3] = D[g][8j+2t], D[g][8j+2t+1],
/// D[g+8][8j+2t], D[g+8][8j+2t+1] (mmaBf16's fragments of each 8 columns j). A comes from the warp's
/// registers, `a` as mmaBf16's a0..a7 for the warp's 16 rows, or from a K-major tile; B from a tile.
/// The product runs behind the statements after it: wgmmaCommit() closes the products this thread
/// started into a group, wgmmaWait(n, acc) waits until at most n groups are in flight, after which
/// `acc` (the locals the finished products wrote) may be read. wgmmaFence() must come between
/// writes of a product's accumulators or register operands and the product (and first, before any).
/// Tiles written by the block's threads (cp.async, shared stores) are read by a product only after
/// each writer's fenceProxyAsync() and then a barrier.
/// With `accumulate` false the product replaces the accumulators: D = A B (their values before
/// it are not read).
StmtRef wgmmaBf16(std::vector<int> acc, std::vector<ExprRef> a, WgmmaTile b, bool accumulate = true);
StmtRef wgmmaBf16(std::vector<int> acc, WgmmaTile a, WgmmaTile b, bool accumulate = true);
StmtRef wgmmaFence();
StmtRef wgmmaCommit();
StmtRef wgmmaWait(int inFlight, std::vector<int> acc);
StmtRef fenceProxyAsync();

/// Hopper's bulk copies out of shared memory (PTX cp.async.bulk, sm_90), for gpuOnly kernels:
/// bulkStore starts a copy of `bytes` bytes (a multiple of 16) from shared array `array` at
/// element `sharedIndex` into `buffer` at element `index` (both 16-byte aligned) that the copy
/// engine runs behind the statements after it. Its shared bytes were written by threads that
/// each ran fenceProxyAsync() and then a barrier before it, and are not written again before the
/// copy's group is waited for: bulkCommit() closes the bulk copies this thread started since its
/// last one into a group; bulkWait(n) waits until at most n of the thread's groups are in flight
/// (their shared bytes read, their global ones written); bulkReadWait(n) only until their shared
/// bytes are read (which may then be written again). A thread waits (bulkWait) for all of its
/// groups before its block ends.
StmtRef bulkStore(int array, ExprRef sharedIndex, int buffer, ExprRef index, int64_t bytes);
StmtRef bulkCommit();
StmtRef bulkWait(int inFlight);
StmtRef bulkReadWait(int inFlight);

struct SharedArray {
  ir::DType dtype;
  int64_t count;
  int64_t align = 16; ///< bytes; 1024 for wgmma tiles
};

struct BufferArg {
  std::string name;
  ir::DType dtype;
  int64_t numel;
  bool written;
};

struct Kernel {
  std::string name;
  std::vector<BufferArg> buffers;
  std::vector<SharedArray> shared; ///< GPU: each block's shared memory (sharedBytes; at most kMostShared)
  StmtRef body;
  int numLoopVars = 0, numLocals = 0;
  bool gpuOnly = false; ///< uses warp operations: emitted for GPU targets only
  bool cpuOnly = false; ///< a GPU never launches it (a GPU form or a horizontal kernel runs instead): emitted for the CPU only
  int threads = 256;    ///< GPU: threads per block (a multiple of 32)
  int minBlocks = 0;    ///< GPU: blocks an SM must hold at once (caps the registers; 0: no cap)
};

/// GPU: how many consecutive iterations of the parallel loop each thread of `k` runs, so that
/// neighbouring elements' loads and stores merge into 16-byte accesses: streamVectorWidth over
/// all its buffers when its body is one parallel loop of stores only (an elementwise kernel);
/// else 1. The iterations of a parallel loop are independent, so any width is correct; the
/// emitter computes a store's values for all of a thread's iterations before it stores them, so
/// that loads and stores are adjacent and merge.
int vectorWidthFor(const Kernel& k);

/// The rule vectorWidthFor and loopVectorWidth share: 16 bytes of the widest element among
/// `buffers` that a loop of `extent` iterations streams through (numel >= extent: a broadcast
/// operand such as the learning rate does not count), at most 8, halved until it divides
/// `extent`. The widest, not the narrowest: AdamUpdate's f32 state with its bf16 copy at 8
/// elements a thread held 64-72 registers and ran 2-3% slower than at 4; the MLP's loss kernel
/// (bf16 and f32 in, f32 out) took 0.200 ms against 0.157 (A/B on an H100, bench/RESULTS.md,
/// session 35).
int streamVectorWidth(const Kernel& k, const std::set<int>& buffers, int64_t extent);

/// 16 bytes of elements `elementBytes` wide, at most 8: the widest vector a thread moves.
int widestVector(size_t elementBytes);
/// widestVector(elementBytes), halved until it divides `extent`.
int storeVectorWidth(size_t elementBytes, int64_t extent);

/// Whether a warp's operations appear in `s` (warp reductions, mma and wgmma products): its lanes
/// must all reach them together.
bool hasWarpOps(const Stmt& s);
/// Whether a block's shared-memory operations appear in `s` (shared loads and stores, copies and
/// their waits, barriers): its block's threads must all reach them together.
bool hasBlockOps(const Stmt& s);

/// Whether `loop`'s body holds only stores (an elementwise loop: an iteration computes all its
/// values before it stores any).
bool storesOnly(const Stmt& loop);

/// Whether `k` may be a part of a horizontal kernel: one parallel loop (of stores: an elementwise
/// kernel; or a reduction's, with atomic adds) on blocks of the default 256 threads and no block
/// minimum; not gpuOnly and without shared memory, or gpuOnly with whole blocks that work
/// together through shared memory and barriers alone (no warp operations): column sums a block
/// per tile (ColumnSumsGpu.h).
bool isHorizontalPart(const Kernel& k);

/// Whether `k` is an elementwise kernel: a horizontal part whose loop holds only stores.
bool isElementwisePart(const Kernel& k);

/// Whether `k` stores zeros over the whole of its one buffer (an accumulator's zeroing, zeroKernel)
/// and does nothing else.
bool isZeroing(const Kernel& k);

/// One part of a horizontal kernel: a kernel of which isHorizontalPart holds, and the name of the tensor each of its buffers stands for
/// in this launch (a kernel is carried once for launches over different tensors).
struct HorizontalPart {
  const Kernel* kernel;
  std::vector<std::string> tensors;
};

/// Independent kernels as one GPU launch (a horizontal fusion, as a multi-tensor optimizer
/// step): the body is a block of the parts' parallel loops; on a GPU each part has GPU blocks of
/// its own (partBlocks, in order), over which it runs as a grid-stride loop with its own vector
/// width (loopVectorWidth), so that the parts run side by side. Parts naming one tensor share
/// its buffer. The parts must be independent: no part writes bytes another reads or writes (the
/// caller checks the memory plan), their blocks within one grid (kMostHorizontalParts parts always
/// are; many small ones too). gpuOnly: a CPU runs the parts.
Kernel horizontal(const std::string& name, const std::vector<HorizontalPart>& parts);

/// Whether `k` is a horizontal kernel: gpuOnly, its body a block of parallel loops.
bool isHorizontal(const Kernel& k);

/// A GPU block's shared memory: up to kMostStaticShared as static arrays; past that the arrays live
/// in the block's dynamic shared memory, which a launch asks for (dynamicSharedBytes), up to
/// an sm_90 block's most (sm_80's is 163 KiB: such a kernel then fails to launch, saying so).
constexpr int64_t kMostStaticShared = 48 << 10, kMostShared = 227 << 10;

/// Where each of k's shared arrays starts, in bytes: one after another, each at its alignment.
std::vector<int64_t> sharedOffsets(const Kernel& k);
/// The bytes of k's shared arrays, alignment included.
int64_t sharedBytes(const Kernel& k);
/// The dynamic shared memory a launch of `k` asks for: 0 when its arrays fit static shared memory,
/// else their bytes and room to align their start to the largest alignment (the block's dynamic
/// shared memory is only 16-byte aligned).
int64_t dynamicSharedBytes(const Kernel& k);

/// Whether `k` has warpgroup products. On a GPU such a kernel runs one parallel iteration a
/// thread, on a grid of exactly extent / threads blocks (so that the compiler sees its products
/// reached by whole warpgroups alike): its extent must be a multiple of its threads, and at most
/// kMostGridBlocks of them.
bool hasWgmma(const Kernel& k);

/// The vector width of parallel loop `loop` of horizontal kernel `k`: vectorWidthFor's rule over
/// the buffers the loop reads and writes.
int loopVectorWidth(const Kernel& k, const Stmt& loop);

/// The most blocks a GPU launch has: runtime/Cuda.cpp's grids stop there, and a kernel's
/// grid-stride loops cover the rest.
constexpr int64_t kMostGridBlocks = 65535;
/// The most blocks a part of a horizontal kernel runs on (4096 of 256 threads: four waves of an
/// H200's 132 SMs), and so the most parts one launch carries whole.
constexpr int64_t kMostPartBlocks = 4096;
constexpr size_t kMostHorizontalParts = kMostGridBlocks / kMostPartBlocks;

/// The GPU blocks (of k.threads) each part of horizontal kernel `k` runs on: enough for one
/// thread per vector of its iterations, at most kMostPartBlocks (its loop strides over the rest).
std::vector<int64_t> partBlocks(const Kernel& k);
/// The GPU blocks horizontal part `part` (isHorizontalPart) would run on in a horizontal kernel.
int64_t blocksAsPart(const Kernel& part);

/// The parallel iterations a GPU launch of `k` runs before its vector width: the parallel loop's
/// extent; for a horizontal kernel the threads of all its parts' blocks.
int64_t launchExtent(const Kernel& k);

/// A readable listing of the kernel (for --emit=kir and golden tests).
std::string print(const Kernel& k);

/// The kernel's content, exactly (every field, constants by their bits), without its name and
/// its buffers' names: two kernels with one key compile to the same code, which a program then
/// carries once (the twelve layers of a transformer launch the same kernels on other buffers).
std::string contentKey(const Kernel& k);

} // namespace sgc::kir
