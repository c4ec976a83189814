// What --stats reports of the GPU kernels from ptxas -v: each kernel's registers and spilled
// bytes read from the report (its text as ptxas 13 writes it), the blocks an SM holds by
// registers as Nsight Compute's "Block Limit Registers" counts them, and the report's line.
#include "codegen/Package.h"

#include <gtest/gtest.h>

namespace sgc::codegen {
namespace {

// Two kernels of the MLP benchmark's report (sm_90a), with the lines around them.
constexpr const char* kLog = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'sgc_k39_gpu' for 'sm_90a'
ptxas info    : Function properties for sgc_k39_gpu
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 82 registers, used 1 barriers, 8192 bytes smem
ptxas info    : Compile time = 99.215 ms
ptxas info    : (C7519) warpgroup.arrive is injected in around line 12867 by compiler to allow use of registers in GMMA in function 'sgc_k308_gpu_dkv'
ptxas info    : Compiling entry function 'sgc_h68' for 'sm_90a'
ptxas info    : Function properties for sgc_h68
    8 bytes stack frame, 28 bytes spill stores, 72 bytes spill loads
ptxas info    : Used 64 registers, used 0 barriers
)";

TEST(PtxasReport, ReadsRegistersAndSpills) {
  std::vector<GpuKernelResources> k = parsePtxasResources(kLog);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].name, "sgc_k39_gpu");
  EXPECT_EQ(k[0].registers, 82);
  EXPECT_EQ(k[0].spillBytes, 0);
  EXPECT_EQ(k[1].name, "sgc_h68");
  EXPECT_EQ(k[1].registers, 64);
  EXPECT_EQ(k[1].spillBytes, 100);
  EXPECT_TRUE(parsePtxasResources("ptxas fatal   : Unresolved extern function 'f'\n").empty());
}

TEST(PtxasReport, BlocksAnSmByRegisters) {
  // Nsight Compute on an H100 (session 34): 82 registers x 256 threads: 2 blocks; 64 x 256: 4;
  // 215 x 128: 2 (12.5% occupancy); 61 x 256: 4; 28 x 256: 8 (the threads' limit); a serial
  // kernel's one thread: 32 (the blocks' limit).
  EXPECT_EQ((GpuKernelResources{"a", 256, 82}).blocksBySm(), 2);
  EXPECT_EQ((GpuKernelResources{"b", 256, 64}).blocksBySm(), 4);
  EXPECT_EQ((GpuKernelResources{"c", 128, 215}).blocksBySm(), 2);
  EXPECT_EQ((GpuKernelResources{"d", 256, 61}).blocksBySm(), 4);
  EXPECT_EQ((GpuKernelResources{"e", 256, 28}).blocksBySm(), 8);
  EXPECT_EQ((GpuKernelResources{"serial", 1, 16}).blocksBySm(), 32);
  EXPECT_EQ((GpuKernelResources{"unknown", 0, 16}).blocksBySm(), 0);
}

TEST(PtxasReport, NamesTheKernelsWithTheFewestWarps) {
  std::vector<GpuKernelResources> k = parsePtxasResources(kLog);
  k[0].threads = k[1].threads = 256;
  EXPECT_EQ(resourcesReport(k, "sm_90"), "GPU sm_90, ptxas: 2 kernels, 1 spilling registers; fewest warps an SM by registers (of 64): "
                                         "sgc_k39_gpu 16 (82 registers x 256 threads), sgc_h68 32 (64 registers x 256 threads, 100 bytes spilled)\n");
}

TEST(PtxasReport, NamesKernelsWhoseWarpgroupProductsAreSerialized) {
  // ptxas 13's notes (session 36's pipelined attention forward), one before its function's entry,
  // and the C7519 note of kLog, which serializes nothing.
  std::string log = std::string(kLog) +
                    "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma "
                    "instructions defining accumulator registers of a wgmma between start and end of the pipeline stage in the function "
                    "'sgc_k9_gpu_fwd'\n"
                    "ptxas info    : Compiling entry function 'sgc_k9_gpu_fwd' for 'sm_90a'\n"
                    "ptxas info    : Used 124 registers, used 1 barriers, 32768 bytes smem\n"
                    "ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient "
                    "register resources for the function 'sgc_h68'\n";
  std::vector<GpuKernelResources> k = parsePtxasResources(log);
  ASSERT_EQ(k.size(), 3u);
  EXPECT_EQ(k[0].serialized, "");
  EXPECT_EQ(k[1].serialized, "insufficient register resources");
  EXPECT_EQ(k[2].name, "sgc_k9_gpu_fwd");
  EXPECT_EQ(k[2].registers, 124);
  EXPECT_EQ(k[2].serialized, "non wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline stage");
  for (GpuKernelResources& r : k) r.threads = 128;
  std::string report = resourcesReport(k, "sm_90");
  EXPECT_NE(report.find("; warpgroup products serialized by ptxas: sgc_h68 (insufficient register resources), sgc_k9_gpu_fwd (non wgmma"),
            std::string::npos)
      << report;
  k[1].serialized = k[2].serialized = "";
  EXPECT_EQ(resourcesReport(k, "sm_90").find("serialized"), std::string::npos);
}

} // namespace
} // namespace sgc::codegen
