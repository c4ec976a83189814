// The C ABI of a library compiled by sgc, resolved from it with dlopen: what
// `sgc train MODEL.so` and `sgc generate gen.so` host.
#pragma once
#include "ir/Error.h"

#include "sgc/sgc.h"

#include <string>

namespace sgc::driver {

#define SGC_LIBRARY_FUNCTIONS(X)                                                                                                        \
  X(sgc_abi_version) X(sgc_last_error) X(sgc_session_create) X(sgc_session_destroy) X(sgc_tensor_count) X(sgc_tensor_info)           \
  X(sgc_set_input) X(sgc_set_learning_rate) X(sgc_train_step) X(sgc_get_tensor) X(sgc_save) X(sgc_load) X(sgc_rank)                   \
  X(sgc_nccl_unique_id)

/// Functions added later (decoding, self-description): null in a library built before them.
#define SGC_LATER_FUNCTIONS(X)                                                                                                          \
  X(sgc_decode_info_get) X(sgc_seq_add) X(sgc_seq_fork) X(sgc_seq_free) X(sgc_seq_length) X(sgc_decode_step) X(sgc_kv_check)          \
  X(sgc_program_json) X(sgc_memory_plan_bytes) X(sgc_trace_next_step) X(sgc_seq_add_greedy) X(sgc_decode_step_greedy)            \
  X(sgc_seq_add_sample) X(sgc_decode_step_sample) X(sgc_seqs_add)

struct Api {
  void* handle = nullptr;
#define SGC_FN(name) decltype(&::name) name = nullptr;
  SGC_LIBRARY_FUNCTIONS(SGC_FN)
  SGC_LATER_FUNCTIONS(SGC_FN)
#undef SGC_FN
  /// Whether the library has every function of the ABI (else: rebuild it with this sgc).
  bool complete() const;
  Api() = default;
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;
  ~Api();
};

/// Opens the library at `path` (never searched for on the library path) and resolves the ABI.
Error loadApi(const std::string& path, Api& api);

} // namespace sgc::driver
