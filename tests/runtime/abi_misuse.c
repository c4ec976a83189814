/* Misuse of the C ABI, from C: every call returns an error status with a
 * message, leaves outputs untouched, and never aborts the host.
 * Usage: abi_misuse MODEL.so (a compiled samples/mlp_train.onnx) */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "sgc/sgc.h"

static int failures = 0;
#define EXPECT(cond)                                              \
  do {                                                            \
    if (!(cond)) {                                                \
      printf("FAIL line %d: %s\n", __LINE__, #cond);              \
      ++failures;                                                 \
    }                                                             \
  } while (0)

#define FN(ret, name, args) typedef ret(*name##_t) args; name##_t name = (name##_t)dlsym(lib, #name)

int main(int argc, char** argv) {
  void* lib = argc > 1 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!lib) {
    printf("cannot load the model: %s\n", dlerror());
    return 1;
  }
  FN(const char*, sgc_last_error, (void));
  FN(sgc_status, sgc_session_create, (const sgc_session_options*, sgc_session**));
  FN(void, sgc_session_destroy, (sgc_session*));
  FN(sgc_status, sgc_set_input, (sgc_session*, const char*, const DLTensor*));
  FN(sgc_status, sgc_train_step, (sgc_session*, double*));
  FN(sgc_status, sgc_set_learning_rate, (sgc_session*, double));
  FN(sgc_status, sgc_get_tensor, (const sgc_session*, const char*, DLTensor*));
  FN(sgc_status, sgc_load, (sgc_session*, const char*));
  FN(sgc_status, sgc_save, (const sgc_session*, const char*));
  FN(sgc_status, sgc_tensor_info, (const sgc_session*, sgc_tensor_kind, int32_t, const char**, DLDataType*, int32_t*, const int64_t**));
  FN(sgc_status, sgc_tensor_count, (const sgc_session*, sgc_tensor_kind, int32_t*));
  FN(sgc_status, sgc_model_hash, (const sgc_session*, const char**));
  FN(sgc_status, sgc_memory_plan_bytes, (const sgc_session*, uint64_t*));
  FN(sgc_status, sgc_rank, (const sgc_session*, int32_t*, int32_t*));
  FN(sgc_status, sgc_set_tensor, (sgc_session*, const char*, const DLTensor*));
  FN(sgc_status, sgc_trace_next_step, (sgc_session*, const char*));
  FN(sgc_status, sgc_tensor_view, (const sgc_session*, const char*, DLTensor*));

  sgc_session* s = (sgc_session*)0x1; /* must stay untouched on error */
  EXPECT(sgc_session_create(NULL, &s) == SGC_ERROR_INVALID_ARGUMENT && s == (sgc_session*)0x1);
  sgc_session_options bad = SGC_SESSION_OPTIONS_INIT;
  bad.struct_size = 4;
  EXPECT(sgc_session_create(&bad, &s) == SGC_ERROR_INVALID_ARGUMENT && strstr(sgc_last_error(), "ABI version"));
  sgc_session_options gpu = SGC_SESSION_OPTIONS_INIT;
  gpu.device = "cuda:0";
  EXPECT(sgc_session_create(&gpu, &s) == SGC_ERROR_DEVICE && strstr(sgc_last_error(), "cuda:0"));
  gpu.device = "tpu";
  EXPECT(sgc_session_create(&gpu, &s) == SGC_ERROR_DEVICE);
  sgc_session_destroy(NULL); /* accepted */
  /* Data parallelism: bad communicators, ranks and time-outs are refused before anything starts. */
  sgc_session_options dp = SGC_SESSION_OPTIONS_INIT;
  dp.communicator = "gloo";
  EXPECT(sgc_session_create(&dp, &s) == SGC_ERROR_INVALID_ARGUMENT && strstr(sgc_last_error(), "gloo"));
  dp.communicator = "nccl";
  dp.rank = 2, dp.world_size = 2;
  EXPECT(sgc_session_create(&dp, &s) == SGC_ERROR_INVALID_ARGUMENT && strstr(sgc_last_error(), "rank 2 of world size 2"));
  dp.rank = 0;
  EXPECT(sgc_session_create(&dp, &s) == SGC_ERROR_INVALID_ARGUMENT && strstr(sgc_last_error(), "GPU sessions"));
  dp.communicator = "mpi", dp.timeout_ms = -1;
  EXPECT(sgc_session_create(&dp, &s) == SGC_ERROR_INVALID_ARGUMENT && strstr(sgc_last_error(), "timeout_ms"));
  EXPECT(s == (sgc_session*)0x1);
  /* A stream of the host's is for GPU sessions. */
  sgc_session_options cpuStream = SGC_SESSION_OPTIONS_INIT;
  cpuStream.cuda_stream = (void*)0x10;
  EXPECT(sgc_session_create(&cpuStream, &s) == SGC_ERROR_INVALID_ARGUMENT && strstr(sgc_last_error(), "cuda_stream"));
  EXPECT(s == (sgc_session*)0x1);
  /* A host built before the data-parallel fields passes the older, smaller struct: accepted. */
  sgc_session_options old = SGC_SESSION_OPTIONS_INIT;
  old.struct_size = (uint32_t)offsetof(sgc_session_options, communicator);
  EXPECT(sgc_session_create(&old, &s) == SGC_OK);
  int32_t rank = -1, world = -1;
  EXPECT(sgc_rank(s, &rank, &world) == SGC_OK && rank == 0 && world == 1);
  EXPECT(sgc_rank(s, NULL, &world) == SGC_ERROR_INVALID_ARGUMENT);
  sgc_session_destroy(s);
  s = (sgc_session*)0x1;

  /* A thread count beyond four a core (at least 64) is refused, not tried. */
  sgc_session_options many = SGC_SESSION_OPTIONS_INIT;
  many.num_threads = 100000;
  EXPECT(sgc_session_create(&many, &s) == SGC_ERROR_INVALID_ARGUMENT && strstr(sgc_last_error(), "num_threads") && s == (sgc_session*)0x1);

  sgc_session_options o = SGC_SESSION_OPTIONS_INIT;
  EXPECT(sgc_session_create(&o, &s) == SGC_OK);

  /* Self-description: inputs, parameters, the loss output, the plan size, a SHA-256 content hash. */
  int32_t n = -1;
  EXPECT(sgc_tensor_count(s, SGC_TENSOR_INPUT, &n) == SGC_OK && n == 2);
  EXPECT(sgc_tensor_count(s, SGC_TENSOR_PARAMETER, &n) == SGC_OK && n == 8);
  EXPECT(sgc_tensor_count(s, SGC_TENSOR_OUTPUT, &n) == SGC_OK && n == 1);
  const char* out_name = NULL;
  int32_t out_ndim = -1;
  EXPECT(sgc_tensor_info(s, SGC_TENSOR_OUTPUT, 0, &out_name, NULL, &out_ndim, NULL) == SGC_OK && !strcmp(out_name, "loss") && out_ndim == 0);
  const char* hash = NULL;
  EXPECT(sgc_model_hash(s, &hash) == SGC_OK && strlen(hash) == 64);
  uint64_t plan = 0;
  EXPECT(sgc_memory_plan_bytes(s, &plan) == SGC_OK && plan > 0);
  double loss = -7;
  EXPECT(sgc_train_step(s, &loss) == SGC_ERROR_INVALID_ARGUMENT && strstr(sgc_last_error(), "was not set") && loss == -7);
  EXPECT(sgc_train_step(NULL, &loss) == SGC_ERROR_INVALID_ARGUMENT);
  EXPECT(sgc_trace_next_step(NULL, "t.json") == SGC_ERROR_INVALID_ARGUMENT);
  EXPECT(sgc_train_step(s, NULL) == SGC_ERROR_INVALID_ARGUMENT);

  float x[32 * 16] = {0};
  int64_t xshape[2] = {32, 16}, wrong[2] = {16, 32};
  DLTensor t = {x, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, xshape, NULL, 0};
  EXPECT(sgc_set_input(s, "nope", &t) == SGC_ERROR_NOT_FOUND && strstr(sgc_last_error(), "nope"));
  EXPECT(sgc_set_input(s, NULL, &t) == SGC_ERROR_NOT_FOUND);
  EXPECT(sgc_set_input(s, "x", NULL) == SGC_ERROR_INVALID_ARGUMENT);
  t.shape = wrong;
  EXPECT(sgc_set_input(s, "x", &t) == SGC_ERROR_SHAPE_MISMATCH && strstr(sgc_last_error(), "F32[32, 16]"));
  t.shape = xshape;
  t.dtype.bits = 64;
  EXPECT(sgc_set_input(s, "x", &t) == SGC_ERROR_DTYPE_MISMATCH);
  t.dtype.bits = 32;
  t.device.device_type = kDLCUDA;
  EXPECT(sgc_set_input(s, "x", &t) == SGC_ERROR_DEVICE);
  t.device.device_type = kDLCPU;
  int64_t strides[2] = {1, 32};
  t.strides = strides;
  EXPECT(sgc_set_input(s, "x", &t) == SGC_ERROR_INVALID_ARGUMENT && strstr(sgc_last_error(), "contiguous"));
  t.strides = NULL;
  /* A dim count that is not the input's: refused without reading the host's (2-entry) shape array. */
  t.ndim = 1000000;
  EXPECT(sgc_set_input(s, "x", &t) == SGC_ERROR_SHAPE_MISMATCH && strstr(sgc_last_error(), "1000000 dims"));
  t.ndim = 0x7fffffff;
  EXPECT(sgc_set_input(s, "x", &t) == SGC_ERROR_SHAPE_MISMATCH);
  t.ndim = 2;
  EXPECT(sgc_set_input(s, "x", &t) == SGC_OK);
  EXPECT(sgc_set_input(s, "sgc.lr", &t) == SGC_ERROR_NOT_FOUND); /* the learning rate has its own setter */
  EXPECT(sgc_set_learning_rate(s, -1) == SGC_ERROR_INVALID_ARGUMENT);

  float w[4];
  int64_t wshape[1] = {4};
  DLTensor out = {w, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, wshape, NULL, 0};
  EXPECT(sgc_get_tensor(s, "mlp.fc1.weight", &out) == SGC_ERROR_SHAPE_MISMATCH);
  EXPECT(sgc_get_tensor(s, "x", &out) == SGC_ERROR_NOT_FOUND); /* inputs are not parameters */
  EXPECT(sgc_tensor_info(s, SGC_TENSOR_PARAMETER, 999, NULL, NULL, NULL, NULL) == SGC_ERROR_NOT_FOUND);
  EXPECT(sgc_tensor_info(s, (sgc_tensor_kind)7, 0, NULL, NULL, NULL, NULL) == SGC_ERROR_INVALID_ARGUMENT);
  EXPECT(sgc_load(s, "/nonexistent/ckpt.safetensors") == SGC_ERROR_IO && strstr(sgc_last_error(), "cannot open"));
  EXPECT(sgc_save(s, "/nonexistent/dir/ckpt.safetensors") == SGC_ERROR_IO);
  EXPECT(sgc_save(NULL, "x") == SGC_ERROR_INVALID_ARGUMENT);
  EXPECT(sgc_load(s, "/tmp") == SGC_ERROR_IO && strstr(sgc_last_error(), "directory"));

  /* Class labels out of range are refused as they are set (the kernels would clamp them). */
  int64_t labels[32] = {0}, lshape[1] = {32};
  DLTensor lt = {labels, {kDLCPU, 0}, 1, {kDLInt, 64, 1}, lshape, NULL, 0};
  labels[5] = 1000;
  EXPECT(sgc_set_input(s, "labels", &lt) == SGC_ERROR_INVALID_ARGUMENT && strstr(sgc_last_error(), "holds 1000"));
  labels[5] = -5;
  EXPECT(sgc_set_input(s, "labels", &lt) == SGC_ERROR_INVALID_ARGUMENT && strstr(sgc_last_error(), "holds -5"));
  labels[5] = -100; /* the loss's ignore_index */
  EXPECT(sgc_set_input(s, "labels", &lt) == SGC_OK);

  /* The step counter is a count: a negative one is refused. */
  int64_t stepv = -3, step0 = -1;
  DLTensor st = {&stepv, {kDLCPU, 0}, 0, {kDLInt, 64, 1}, NULL, NULL, 0};
  EXPECT(sgc_set_tensor(s, "sgc.step", &st) == SGC_ERROR_INVALID_ARGUMENT && strstr(sgc_last_error(), "sgc.step is -3"));

  /* A NaN loss: SGC_ERROR_NONFINITE, and parameters, optimizer state and the step counter as before. */
  static float before[32 * 16], after[32 * 16];
  int64_t w1shape[2] = {32, 16};
  DLTensor w1 = {before, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, w1shape, NULL, 0};
  EXPECT(sgc_get_tensor(s, "mlp.fc1.weight", &w1) == SGC_OK);
  x[7] = 0.0f / 0.0f;
  EXPECT(sgc_set_input(s, "x", &t) == SGC_OK);
  loss = 0;
  EXPECT(sgc_train_step(s, &loss) == SGC_ERROR_NONFINITE && loss != loss && strstr(sgc_last_error(), "not applied"));
  w1.data = after;
  EXPECT(sgc_get_tensor(s, "mlp.fc1.weight", &w1) == SGC_OK && memcmp(before, after, sizeof before) == 0);
  st.data = &step0;
  EXPECT(sgc_get_tensor(s, "sgc.step", &st) == SGC_OK && step0 == 0);
  x[7] = 0;
  EXPECT(sgc_set_input(s, "x", &t) == SGC_OK);
  EXPECT(sgc_train_step(s, &loss) == SGC_OK && loss == loss);
  EXPECT(sgc_get_tensor(s, "mlp.fc1.weight", &w1) == SGC_OK && memcmp(before, after, sizeof before) != 0);
  EXPECT(sgc_get_tensor(s, "sgc.step", &st) == SGC_OK && step0 == 1);
  /* A trace into a folder that does not exist is refused before the step, which then runs untraced. */
  EXPECT(sgc_trace_next_step(s, "/nonexistent/t.json") == SGC_ERROR_IO && strstr(sgc_last_error(), "/nonexistent"));
  EXPECT(sgc_train_step(s, &loss) == SGC_OK);
  /* A view is the session's own memory: what sgc_get_tensor copies, at the same shape. */
  DLTensor view;
  EXPECT(sgc_tensor_view(NULL, "mlp.fc1.weight", &view) == SGC_ERROR_INVALID_ARGUMENT);
  EXPECT(sgc_tensor_view(s, "nope", &view) == SGC_ERROR_NOT_FOUND && strstr(sgc_last_error(), "nope"));
  EXPECT(sgc_tensor_view(s, "mlp.fc1.weight", &view) == SGC_OK && view.ndim == 2 && view.device.device_type == kDLCPU &&
         sgc_get_tensor(s, "mlp.fc1.weight", &w1) == SGC_OK && memcmp(view.data, after, sizeof after) == 0);
  sgc_session_destroy(s);
  printf("abi misuse: %d failures\n", failures);
  return failures != 0;
}
