// runtime/NcclApi.h declares the part of NCCL the runtime calls without
// NCCL's header; here each value and layout is checked against nccl.h
// (SKIP where the CUDA toolkit's NCCL header is absent).
#include "runtime/NcclApi.h"

#include <gtest/gtest.h>

#if __has_include(<nccl.h>)
#include <nccl.h>

namespace nccl = sgc::rt::nccl;

TEST(NcclApi, MatchesTheHeader) {
  EXPECT_EQ(nccl::kSuccess, ncclSuccess);
  EXPECT_EQ(nccl::kInProgress, ncclInProgress);
  EXPECT_EQ(nccl::kUint8, ncclUint8);
  EXPECT_EQ(nccl::kFloat32, ncclFloat32);
  EXPECT_EQ(nccl::kFloat64, ncclFloat64);
  EXPECT_EQ(nccl::kBfloat16, ncclBfloat16);
  EXPECT_EQ(nccl::kSum, ncclSum);
  EXPECT_EQ(nccl::kAvg, ncclAvg);
  // Our Config is the leading part of the header's ncclConfig_t, field for field.
  ncclConfig_t full = NCCL_CONFIG_INITIALIZER;
  nccl::Config ours;
  EXPECT_EQ(ours.magic, full.magic);
  EXPECT_EQ(offsetof(nccl::Config, blocking), offsetof(ncclConfig_t, blocking));
  EXPECT_EQ(offsetof(nccl::Config, maxCTAs), offsetof(ncclConfig_t, maxCTAs));
  EXPECT_EQ(offsetof(nccl::Config, netName), offsetof(ncclConfig_t, netName));
  EXPECT_EQ(offsetof(nccl::Config, splitShare), offsetof(ncclConfig_t, splitShare));
  EXPECT_EQ(ours.cgaClusterSize, full.cgaClusterSize);
  EXPECT_EQ(ours.netName, full.netName);
  EXPECT_EQ(sizeof(ncclUniqueId), 128u);
}
#else
TEST(NcclApi, MatchesTheHeader) { GTEST_SKIP() << "no nccl.h (the CUDA toolkit is absent)"; }
#endif
