// runtime/CublasLtApi.h declares the part of cuBLASLt the runtime calls
// without CUDA's headers; here each value and layout is checked against
// cublasLt.h (SKIP where the CUDA toolkit is absent).
#include "runtime/CublasLtApi.h"

#include <gtest/gtest.h>

#if __has_include(<cublasLt.h>)
#include <cublasLt.h>

namespace lt = sgc::rt::lt;

TEST(CublasLtApi, MatchesTheHeader) {
  EXPECT_EQ(lt::kOpN, CUBLAS_OP_N);
  EXPECT_EQ(lt::kOpT, CUBLAS_OP_T);
  EXPECT_EQ(lt::kComputeF32, CUBLAS_COMPUTE_32F);
  EXPECT_EQ(lt::kTypeF32, CUDA_R_32F);
  EXPECT_EQ(lt::kTypeF16, CUDA_R_16F);
  EXPECT_EQ(lt::kTypeBF16, CUDA_R_16BF);
  EXPECT_EQ(lt::kDescTransA, CUBLASLT_MATMUL_DESC_TRANSA);
  EXPECT_EQ(lt::kDescTransB, CUBLASLT_MATMUL_DESC_TRANSB);
  EXPECT_EQ(lt::kLayoutBatchCount, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT);
  EXPECT_EQ(lt::kLayoutBatchStride, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET);
  EXPECT_EQ(lt::kPrefMaxWorkspace, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
  EXPECT_EQ(lt::kPrefAlignA, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES);
  EXPECT_EQ(lt::kPrefAlignB, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES);
  EXPECT_EQ(lt::kPrefAlignC, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES);
  EXPECT_EQ(lt::kPrefAlignD, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES);
  EXPECT_EQ(sizeof(lt::Algo), sizeof(cublasLtMatmulAlgo_t));
  EXPECT_EQ(sizeof(lt::HeuristicResult), sizeof(cublasLtMatmulHeuristicResult_t));
  EXPECT_EQ(offsetof(lt::HeuristicResult, workspaceSize), offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize));
  EXPECT_EQ(offsetof(lt::HeuristicResult, state), offsetof(cublasLtMatmulHeuristicResult_t, state));
  EXPECT_EQ(sizeof(lt::Status), sizeof(cublasStatus_t));
}
#else
TEST(CublasLtApi, MatchesTheHeader) { GTEST_SKIP() << "no cublasLt.h (the CUDA toolkit is absent)"; }
#endif
