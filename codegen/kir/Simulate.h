// A GPU's run of a kernel, simulated on this CPU: the GPU forms of nodes (warp reductions, a
// block's shared memory and barriers, asynchronous copies, tensor-core and warpgroup products)
// checked against the interpreter where no GPU is, in CI.
//
// The simulation runs the kernel IR as the NVPTX emitter's code runs it on a GPU: each block of
// k.threads consecutive parallel iterations as that many threads in lockstep, statement by
// statement, warps of 32 consecutive threads; one thread for a serial kernel; a horizontal
// kernel's parts one after another. Floats compute in their scalar type (f32 rounds each
// result); the math functions are the C library's, so results differ from a GPU's in the last
// bits only. It checks what a GPU would not, and fails naming the kernel and what went wrong:
//  - every load, store, atomic add and copy inside its buffer or shared array, copies aligned;
//  - a warp reduction or product reached by all 32 lanes of each warp that reaches it, a
//    barrier by every thread of the block;
//  - no thread reads or writes a shared element that another thread wrote (or read, for a write)
//    since the last barrier; an asynchronous copy lands only when its thread waits for it, and
//    a block's shared memory starts as NaNs, so a read too early sees them.
// A warpgroup product (wgmma) reads its tiles and writes its accumulators where it is issued (a
// GPU may do so any time before its wait: a kernel must not depend on the difference).
#pragma once
#include "codegen/kir/Kernel.h"
#include "ir/Error.h"

#include <vector>

namespace sgc::kir {

/// Runs `k` over `buffers`, one pointer per k.buffers, each to numel elements of its dtype.
Error simulateGpu(const Kernel& k, const std::vector<void*>& buffers);

} // namespace sgc::kir
