// The part of cuBLASLt's C API the runtime uses, declared here so that the
// runtime builds without CUDA headers. tests/runtime/CublasLtApiTest.cpp
// checks every value and layout against cublasLt.h where CUDA is installed.
#pragma once
#include <cstddef>
#include <cstdint>

namespace sgc::rt::lt {

using Status = int;   // cublasStatus_t; 0 is success
using Handle = void*; // cublasLtHandle_t and the descriptor handles are pointers to opaque structs

constexpr int kOpN = 0, kOpT = 1;                            // cublasOperation_t
constexpr int kComputeF32 = 68;                              // CUBLAS_COMPUTE_32F
constexpr int kTypeF32 = 0, kTypeF16 = 2, kTypeBF16 = 14;    // cudaDataType_t
constexpr int kDescTransA = 3, kDescTransB = 4;              // cublasLtMatmulDescAttributes_t
constexpr int kDescEpilogue = 7, kDescBiasPointer = 8, kDescBiasBatchStride = 10, kDescBiasDataType = 26;
constexpr int kDescAuxPointer = 11, kDescAuxLd = 12, kDescAuxBatchStride = 13, kDescAuxDataType = 22;
constexpr int32_t kEpilogueBias = 4, kEpilogueGelu = 32, kEpilogueGeluAux = 160; // cublasLtEpilogue_t
constexpr int kLayoutBatchCount = 5, kLayoutBatchStride = 6; // cublasLtMatrixLayoutAttribute_t
constexpr int kPrefMaxWorkspace = 1, kPrefAlignA = 5, kPrefAlignB = 6, kPrefAlignC = 7, kPrefAlignD = 8; // preference attributes

struct Algo {
  uint64_t data[8];
};

struct HeuristicResult {
  Algo algo;
  size_t workspaceSize;
  Status state;
  float wavesCount;
  int reserved[4];
};

} // namespace sgc::rt::lt
