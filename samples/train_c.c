/* Trains a model compiled by sgc from plain C: dlopen the .so, create a
 * session, feed random batches, print the loss of each step.
 * Build: cc -I runtime/include samples/train_c.c -o train_c -ldl
 * Run:   ./train_c train.so STEPS */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "sgc/sgc.h"

#define LOAD(name) name##_fn name = (name##_fn)dlsym(lib, #name)
typedef sgc_status (*sgc_session_create_fn)(const sgc_session_options*, sgc_session**);
typedef void (*sgc_session_destroy_fn)(sgc_session*);
typedef const char* (*sgc_last_error_fn)(void);
typedef sgc_status (*sgc_tensor_count_fn)(const sgc_session*, sgc_tensor_kind, int32_t*);
typedef sgc_status (*sgc_tensor_info_fn)(const sgc_session*, sgc_tensor_kind, int32_t, const char**, DLDataType*, int32_t*, const int64_t**);
typedef sgc_status (*sgc_set_input_fn)(sgc_session*, const char*, const DLTensor*);
typedef sgc_status (*sgc_train_step_fn)(sgc_session*, double*);

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL.so STEPS\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  LOAD(sgc_session_create); LOAD(sgc_session_destroy); LOAD(sgc_last_error); LOAD(sgc_tensor_count);
  LOAD(sgc_tensor_info); LOAD(sgc_set_input); LOAD(sgc_train_step);
  sgc_session_options options = SGC_SESSION_OPTIONS_INIT;
  sgc_session* s = NULL;
  if (sgc_session_create(&options, &s) != SGC_OK) {
    fprintf(stderr, "sgc_session_create: %s\n", sgc_last_error());
    return 1;
  }
  int32_t inputs = 0;
  sgc_tensor_count(s, SGC_TENSOR_INPUT, &inputs);
  srand(1);
  for (int step = 0; step < atoi(argv[2]); ++step) {
    for (int32_t i = 0; i < inputs; ++i) { /* random data of each input's dtype and shape */
      const char* name;
      DLDataType dtype;
      int32_t ndim;
      const int64_t* shape;
      sgc_tensor_info(s, SGC_TENSOR_INPUT, i, &name, &dtype, &ndim, &shape);
      int64_t n = 1;
      for (int32_t d = 0; d < ndim; ++d) n *= shape[d];
      void* data = malloc((size_t)n * (dtype.bits / 8));
      for (int64_t k = 0; k < n; ++k) {
        if (dtype.code == kDLFloat) ((float*)data)[k] = (float)rand() / RAND_MAX - 0.5f;
        else ((int64_t*)data)[k] = rand() % 4; /* class labels */
      }
      DLTensor t = {data, {kDLCPU, 0}, ndim, dtype, (int64_t*)shape, NULL, 0};
      if (sgc_set_input(s, name, &t) != SGC_OK) {
        fprintf(stderr, "sgc_set_input: %s\n", sgc_last_error());
        return 1;
      }
      free(data);
    }
    double loss;
    if (sgc_train_step(s, &loss) != SGC_OK) {
      fprintf(stderr, "sgc_train_step: %s\n", sgc_last_error());
      return 1;
    }
    printf("step %d loss %.6f\n", step, loss);
  }
  sgc_session_destroy(s);
  dlclose(lib);
  return 0;
}
