/* A rank that fails mid-run, for the data-parallel fault test: it joins the
 * MPI ranks of a library compiled with --data-parallel, trains STEPS steps on
 * zeros, then exits at once (no MPI_Finalize), as a crashed process would.
 * Usage (under mpirun): fault_rank MODEL.so STEPS */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sgc/sgc.h"

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
  sgc_status (*create)(const sgc_session_options*, sgc_session**) = dlsym(lib, "sgc_session_create");
  const char* (*last_error)(void) = dlsym(lib, "sgc_last_error");
  sgc_status (*count)(const sgc_session*, sgc_tensor_kind, int32_t*) = dlsym(lib, "sgc_tensor_count");
  sgc_status (*info)(const sgc_session*, sgc_tensor_kind, int32_t, const char**, DLDataType*, int32_t*, const int64_t**) =
      dlsym(lib, "sgc_tensor_info");
  sgc_status (*set_input)(sgc_session*, const char*, const DLTensor*) = dlsym(lib, "sgc_set_input");
  sgc_status (*train_step)(sgc_session*, double*) = dlsym(lib, "sgc_train_step");
  sgc_session_options options = SGC_SESSION_OPTIONS_INIT;
  options.communicator = "mpi";
  sgc_session* s = NULL;
  if (create(&options, &s) != SGC_OK) {
    fprintf(stderr, "fault_rank: %s\n", last_error());
    return 1;
  }
  int32_t inputs = 0;
  count(s, SGC_TENSOR_INPUT, &inputs);
  for (int32_t i = 0; i < inputs; ++i) {
    const char* name;
    DLDataType dtype;
    int32_t ndim;
    const int64_t* shape;
    info(s, SGC_TENSOR_INPUT, i, &name, &dtype, &ndim, &shape);
    int64_t n = 1;
    for (int32_t d = 0; d < ndim; ++d) n *= shape[d];
    DLTensor t = {calloc((size_t)n, dtype.bits / 8), {kDLCPU, 0}, ndim, dtype, (int64_t*)shape, NULL, 0};
    set_input(s, name, &t);
  }
  for (int step = 0; step < atoi(argv[2]); ++step) {
    double loss;
    if (train_step(s, &loss) != SGC_OK) {
      fprintf(stderr, "fault_rank: %s\n", last_error());
      return 1;
    }
  }
  fprintf(stderr, "fault_rank: exiting after %s steps\n", argv[2]);
  _exit(3);
}
