// The part of NCCL's API the runtime calls (runtime/CommNccl.cpp), declared
// without NCCL's header, which the .so must not need; tests/runtime/
// CommApiTest.cpp checks each value and layout against nccl.h.
#pragma once
#include <cstddef>
#include <cstdint>

namespace sgc::rt::nccl {

using Result = int;
inline constexpr Result kSuccess = 0, kInProgress = 7; // ncclSuccess, ncclInProgress
inline constexpr int kUint8 = 1, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9; // ncclDataType_t
inline constexpr int kSum = 0, kAvg = 4;                                   // ncclRedOp_t

/// NCCL 2.18's ncclConfig_t (newer libraries accept it: they read `size` bytes of it).
struct Config {
  size_t size = sizeof(Config);
  unsigned magic = 0xcafebeef;
  unsigned version = 21801; // NCCL_VERSION(2, 18, 1)
  int blocking = 0;         // non-blocking: calls may return ncclInProgress
  int cgaClusterSize = INT32_MIN, minCTAs = INT32_MIN, maxCTAs = INT32_MIN;
  const char* netName = nullptr;
  int splitShare = INT32_MIN;
};

} // namespace sgc::rt::nccl
