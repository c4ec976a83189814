// The C ABI (include/sgc/sgc.h) over two executors: a session owns the arena
// laid out by the static memory plan (in host memory, or as one allocation on
// a GPU), runs the step's kernel launches (on the CPU, parallel ones split
// across a thread pool; on the GPU, the library's cubin or PTX), applies the
// updates, and reads and writes tensors and checkpoints. No exception crosses
// the ABI.
#include "runtime/Session.h"

#include "runtime/OutputFile.h"
#include "runtime/Safetensors.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <dlfcn.h>
#include <sys/stat.h>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <system_error>
#include <thread>

using namespace sgc::rt;

namespace {

thread_local std::string lastError;

} // namespace

namespace __gnu_cxx {
void __freeres(); // libstdc++'s: frees its emergency exception pool
}

namespace {

/// The library carries its own libstdc++ (-static-libstdc++), whose emergency exception pool
/// (72 KB) is allocated as the library loads and never freed: released as it unloads, so that a
/// host that loads and unloads libraries (a server swapping models) does not leak.
__attribute__((destructor)) void releaseOnUnload() { __gnu_cxx::__freeres(); }


DLDataType dlType(const std::string& st) {
  static const std::map<std::string, DLDataType> m = {
      {"F64", {kDLFloat, 64, 1}}, {"F32", {kDLFloat, 32, 1}}, {"F16", {kDLFloat, 16, 1}}, {"BF16", {kDLBfloat, 16, 1}},
      {"I64", {kDLInt, 64, 1}},   {"I32", {kDLInt, 32, 1}},   {"I16", {kDLInt, 16, 1}},   {"I8", {kDLInt, 8, 1}},
      {"U64", {kDLUInt, 64, 1}},  {"U32", {kDLUInt, 32, 1}},  {"U16", {kDLUInt, 16, 1}},  {"U8", {kDLUInt, 8, 1}},
      {"BOOL", {kDLUInt, 8, 1}}};
  auto it = m.find(st);
  return it == m.end() ? DLDataType{kDLOpaqueHandle, 0, 0} : it->second;
}

std::string shapeText(const std::string& dtype, const int64_t* shape, int ndim) {
  std::string s = dtype + "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace


namespace {

/// Checks `t` against tensor `id`: dtype, shape, contiguity, and where it lies: host memory, or
/// (a GPU session) its own GPU.
sgc_status checkTensor(const sgc_session* s, int id, const DLTensor* t, const char* what) {
  const TensorDesc& d = s->prog.tensors[id];
  if (!t || !t->data) return fail(SGC_ERROR_INVALID_ARGUMENT, std::string(what) + " '" + d.name + "': the DLTensor or its data is NULL");
  bool onOurGpu = s->gpu && t->device.device_type == kDLCUDA && t->device.device_id == s->ordinal;
  if (t->device.device_type != kDLCPU && !onOurGpu)
    return fail(SGC_ERROR_DEVICE, std::string(what) + " '" + d.name + "': the tensor must be in host memory" +
                                      (s->gpu ? " or on the session's device, cuda:" + std::to_string(s->ordinal) : ""));
  DLDataType want = dlType(d.dtype);
  if (t->dtype.code != want.code || t->dtype.bits != want.bits || t->dtype.lanes != 1)
    return fail(SGC_ERROR_DTYPE_MISMATCH, std::string(what) + " '" + d.name + "' expects dtype " + d.dtype);
  std::string expects = std::string(what) + " '" + d.name + "' expects shape " + shapeText(d.dtype, d.shape.data(), (int)d.shape.size());
  if (t->ndim != (int)d.shape.size()) // the host's shape array is not read: its length is what is wrong
    return fail(SGC_ERROR_SHAPE_MISMATCH, expects + ", got a tensor of " + std::to_string(t->ndim) + " dims");
  if (t->ndim && !t->shape) return fail(SGC_ERROR_INVALID_ARGUMENT, std::string(what) + " '" + d.name + "': the shape is NULL");
  if (t->ndim && std::memcmp(t->shape, d.shape.data(), sizeof(int64_t) * t->ndim) != 0)
    return fail(SGC_ERROR_SHAPE_MISMATCH, expects + ", got " + shapeText(d.dtype, t->shape, t->ndim));
  if (t->strides) { // only contiguous row-major
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
      if (t->shape[i] != 1 && t->strides[i] != expect)
        return fail(SGC_ERROR_INVALID_ARGUMENT, std::string(what) + " '" + d.name + "' must be contiguous");
      expect *= t->shape[i];
    }
  }
  return SGC_OK;
}

/// The step counter's value (8 bytes of int64) is a step count, from 0 to SGC_MAX_STEP.
sgc_status checkStep(const std::string& where, const uint8_t* bytes) {
  int64_t v;
  std::memcpy(&v, bytes, 8);
  if (v >= 0 && v <= SGC_MAX_STEP) return SGC_OK;
  return fail(SGC_ERROR_INVALID_ARGUMENT, where + "sgc.step is " + std::to_string(v) + ": a step count is from 0 to 2^53");
}

/// An input that indexes (labels, token ids) holds only values its kernels can use: they would
/// clamp the others into a wrong answer.
sgc_status checkRange(const TensorDesc& d, const uint8_t* data) {
  if (!d.range) return SGC_OK;
  size_t size = stDTypeSize(d.dtype), count = d.bytes / size;
  for (size_t i = 0; i < count; ++i) {
    int64_t v;
    if (size == 8) {
      std::memcpy(&v, data + 8 * i, 8);
    } else if (size == 4) {
      int32_t w;
      std::memcpy(&w, data + 4 * i, 4);
      v = w;
    } else {
      return SGC_OK;
    }
    if ((v >= d.range->lo && v <= d.range->hi) || (d.range->ignore && v == *d.range->ignore)) continue;
    return fail(SGC_ERROR_INVALID_ARGUMENT, "input '" + d.name + "' holds " + std::to_string(v) + " at element " + std::to_string(i) +
                                                ": its values index from " + std::to_string(d.range->lo) + " to " + std::to_string(d.range->hi) +
                                                (d.range->ignore ? " (or are " + std::to_string(*d.range->ignore) + ", ignored)" : ""));
  }
  return SGC_OK;
}

int findTensor(const sgc_session* s, const char* name, std::initializer_list<TensorKind> kinds) {
  if (!name) return -1;
  auto it = s->byName.find(name);
  if (it == s->byName.end()) return -1;
  for (TensorKind k : kinds)
    if (s->prog.tensors[it->second].kind == k) return it->second;
  return -1;
}

/// Starts launch i's collective (pending[i] names it), or does it here when it is local or there is one rank.
bool startCollective(sgc_session* s, const Collective& c, size_t i, std::map<int, int>& pending, std::string& error) {
  if (c.op == "allreduce") return !s->comm || s->comm->start(s->spans[i], c.average, pending[(int)i], error);
  int in = c.tensors[0], out = c.tensors[1];
  uint64_t bytes = s->prog.tensors[out].bytes;
  int rank = s->comm ? s->comm->rank() : 0;
  if (c.op == "shard") {
    std::memcpy(s->data(out), s->data(in) + (uint64_t)rank * bytes, bytes);
    return true;
  }
  if (!s->comm) { // one rank: the shard is the whole
    std::memcpy(s->data(out), s->data(in), bytes);
    return true;
  }
  Span from = tensorSpan(s->prog, in, s->address[in]), to = tensorSpan(s->prog, out, s->address[out]);
  return c.op == "reduce_scatter" ? s->comm->startReduceScatter(from, to, c.average, pending[(int)i], error)
                                  : s->comm->startAllGather(from, to, pending[(int)i], error);
}

/// One event of a traced step: launch `launch` from `start` to `end` microseconds after the step
/// began, on thread 0 (the CPU's kernels, the GPU's compute stream) or 1 (the wait for a
/// collective on the CPU, the GPU's communication stream). `kernel`: what it ran.
struct TraceEvent {
  size_t launch;
  int thread;
  double start, end;
  std::string kernel;
};

/// The Chrome trace event file of a step's events (sgc_trace_next_step).
std::string traceJson(const sgc_session* s, const std::vector<TraceEvent>& events) {
  nlohmann::json list = nlohmann::json::array();
  bool gpu = s->gpu != nullptr;
  list.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 0}, {"args", {{"name", gpu ? "compute stream" : "compute"}}}});
  list.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 1}, {"args", {{"name", gpu ? "communication stream" : "communication"}}}});
  for (const TraceEvent& e : events) {
    const Launch& l = s->prog.launches[e.launch];
    nlohmann::json args = {{"launch", e.launch}, {"bytes", launchTensorBytes(s->prog, l, gpu)}};
    if (!e.kernel.empty()) args["kernel"] = e.kernel;
    std::string name = e.thread == 1 && !gpu ? "wait: " + l.collective->op : l.label.empty() ? "launch " + std::to_string(e.launch) : l.label;
    list.push_back({{"name", name}, {"cat", e.thread == 1 ? "collective" : "kernel"}, {"ph", "X"}, {"pid", 0}, {"tid", e.thread},
                    {"ts", e.start}, {"dur", e.end - e.start}, {"args", args}});
  }
  return nlohmann::json({{"traceEvents", list}, {"displayTimeUnit", "ms"}}).dump(1) + "\n";
}

/// Writes the trace the session asked for (and asks for none after it).
bool writeTrace(sgc_session* s, const std::vector<TraceEvent>& events, std::string& error) {
  std::string path = std::move(s->tracePath), json = traceJson(s, events);
  s->tracePath.clear();
  return writeOutput(path, json.data(), json.size(), error);
}

/// Runs launch `l`'s kernel on the CPU over `args`, its tensors' addresses.
void runKernel(sgc_session* s, const Launch& l, std::vector<void*>& args) {
  sgcrt_kernel fn = sgcrt_kernels[l.kernel];
  if (l.serial) fn(args.data(), 0, 1);
  else s->pool->parallelFor(l.extent, [&](int64_t b, int64_t e) { fn(args.data(), b, e); });
}

bool runCpuStep(sgc_session* s, bool train, std::string& error) {
  std::vector<void*> args;
  std::map<int, int> pending; // collective launch -> its handle
  bool tracing = !s->tracePath.empty();
  std::vector<TraceEvent> events;
  auto t0 = std::chrono::steady_clock::now();
  auto now = [&] { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count(); };
  auto finish = [&](int c) {
    auto it = pending.find(c);
    if (it == pending.end()) return true;
    int handle = it->second;
    pending.erase(it);
    double from = tracing ? now() : 0;
    bool ok = s->comm->wait(handle, error);
    if (tracing) events.push_back({(size_t)c, 1, from, now(), ""});
    return ok;
  };
  for (size_t i = 0; i < s->prog.launches.size(); ++i) {
    const Launch& l = s->prog.launches[i];
    for (int c : s->waits[i]) // also before a skipped launch: a later one may need it
      if (!finish(c)) return false;
    if ((!train && !l.forward) || l.refresh) continue; // refreshes ran before the step, if needed
    if (l.kernel >= 0) {
      args.clear();
      for (int a : l.args) args.push_back(s->data(a));
      double from = tracing ? now() : 0;
      runKernel(s, l, args);
      if (tracing) events.push_back({i, 0, from, now(), s->prog.kernelNames[l.kernel]});
    }
    if (l.collective && !startCollective(s, *l.collective, i, pending, error)) return false;
  }
  while (!pending.empty())
    if (!finish(pending.begin()->first)) return false;
  if (train)
    for (auto& [target, source] : s->prog.updates) std::memcpy(s->data(target), s->data(source), s->prog.tensors[target].bytes);
  return !tracing || writeTrace(s, events, error);
}

/// The GPU's step, traced when sgc_trace_next_step asked for it (GpuStep times each launch).
bool runGpuStep(sgc_session* s, bool train, std::string& error) {
  bool tracing = !s->tracePath.empty();
  if (tracing) s->gpuStep->traceNextStep();
  if (!s->gpuStep->run(train, error)) return false;
  if (!tracing) return true;
  std::vector<TraceEvent> events;
  for (const GpuStep::Timed& t : s->gpuStep->traceOfLast()) events.push_back({t.launch, t.commStream ? 1 : 0, t.start, t.end, t.kernel});
  return writeTrace(s, events, error);
}

/// Casts the parameters into their bf16 copies when those may be stale (or a view of a parameter
/// is out, through which the host may have written since the last step).
bool refreshCopies(sgc_session* s, std::string& error) {
  if (!s->copiesStale && !s->viewed) return true;
  if (s->gpu) {
    if (!s->gpuStep->refresh(error)) return false;
  } else {
    std::vector<void*> args;
    for (const Launch& l : s->prog.launches)
      if (l.refresh) {
        args.clear();
        for (int a : l.args) args.push_back(s->data(a));
        runKernel(s, l, args);
      }
  }
  s->copiesStale = false;
  return true;
}

bool readScalar(const sgc_session* s, int id, double& out, std::string& error) {
  uint8_t bytes[8];
  if (!s->read(id, bytes, error)) return false;
  if (s->prog.tensors[id].dtype == "F64") {
    std::memcpy(&out, bytes, 8);
    return true;
  }
  float v;
  std::memcpy(&v, bytes, 4);
  out = v;
  return true;
}

sgc_status step(sgc_session* s, double* loss, bool train) {
  if (!s || !loss) return fail(SGC_ERROR_INVALID_ARGUMENT, "session and loss must not be NULL");
  if (s->decode) return fail(SGC_ERROR_INVALID_ARGUMENT, "this library decodes (compiled with --mode decode): use sgc_seq_add and sgc_decode_step");
  if (!s->paramsLoaded)
    return fail(SGC_ERROR_INVALID_ARGUMENT, "the parameters are not loaded: this library was compiled with --weights none; call sgc_load first");
  for (size_t i = 0; i < s->lists[SGC_TENSOR_INPUT].size(); ++i)
    if (!s->inputSet[i])
      return fail(SGC_ERROR_INVALID_ARGUMENT, "input '" + s->prog.tensors[s->lists[SGC_TENSOR_INPUT][i]].name + "' was not set");
  if (!s->broken.empty()) return fail(SGC_ERROR_COMMUNICATION, s->broken);
  float lr = (float)s->lr;
  std::string error;
  double l = 0;
  if (!s->write(s->prog.lr, &lr, error) || !refreshCopies(s, error)) return fail(SGC_ERROR_DEVICE, error);
  if (!runStep(s, train, error)) {
    s->copiesStale = true; // a step cut short may have updated some parameters and not their copies
    if (!s->comm || !s->comm->failed()) return fail(SGC_ERROR_DEVICE, error);
    s->broken = error;
    return fail(SGC_ERROR_COMMUNICATION, error);
  }
  if (!readScalar(s, s->prog.loss, l, error)) return fail(SGC_ERROR_DEVICE, error);
  *loss = l;
  if (train && !std::isfinite(l)) // the step's updates waited on this (ir/training: applyOnlyIfFinite)
    return fail(SGC_ERROR_NONFINITE, std::string("the loss is ") + (std::isnan(l) ? "nan" : "infinite") +
                                         ": the step was not applied (parameters and optimizer state are as they were before it)");
  return SGC_OK;
}

/// The NCCL id every rank uses: with MPI, rank 0 makes it and sends it; else the host passed it.
bool ncclIdOf(Communicator* mpi, const sgc_session_options& o, NcclId& id, std::string& error) {
  if (!mpi) {
    std::memcpy(id.bytes, o.nccl_id, sizeof id.bytes);
    return true;
  }
  std::string mine(sizeof id.bytes, '\0'); // all zeros from rank 0: it could not make one
  if (mpi->rank() == 0 && ncclUniqueId(id, error)) mine.assign(id.bytes, sizeof id.bytes);
  std::vector<std::string> all;
  if (!mpi->allGather(mine, all, error)) return false;
  if (all[0] == std::string(sizeof id.bytes, '\0')) {
    if (mpi->rank() != 0) error = "rank 0 could not make an NCCL id";
    return false;
  }
  std::memcpy(id.bytes, all[0].data(), sizeof id.bytes);
  return true;
}

/// Joins the other ranks: the ranks must run the same program, and several ranks need collectives.
sgc_status connect(sgc_session* s, const sgc_session_options& o, int timeoutMs) {
  std::string error, kind = o.communicator;
  if (kind == "mpi" && !(s->mpi = openMpi(timeoutMs, error))) return fail(SGC_ERROR_COMMUNICATION, error);
  if (s->gpu) {
    NcclId id;
    if (!ncclIdOf(s->mpi.get(), o, id, error)) return fail(SGC_ERROR_COMMUNICATION, error);
    s->comm = openNccl(*s->gpu, s->mpi ? s->mpi->rank() : o.rank, s->mpi ? s->mpi->size() : o.world_size, id, timeoutMs, error);
    if (!s->comm) return fail(SGC_ERROR_COMMUNICATION, error);
  } else if (kind == "nccl") {
    return fail(SGC_ERROR_INVALID_ARGUMENT, "the nccl communicator runs GPU sessions; on the CPU use mpi");
  }
  Communicator& comm = s->comm ? *s->comm : *s->mpi;
  std::vector<std::string> hashes;
  if (!comm.allGather(s->prog.hash, hashes, error)) return fail(SGC_ERROR_COMMUNICATION, error);
  for (int r = 0; r < (int)hashes.size(); ++r)
    if (hashes[r] != s->prog.hash)
      return fail(SGC_ERROR_COMMUNICATION, "rank " + std::to_string(r) + " runs a library of hash " + hashes[r] + ", rank " +
                                               std::to_string(comm.rank()) + " one of hash " + s->prog.hash +
                                               ": every rank must run the same compiled program (model and options)");
  if (comm.size() > 1 && !s->prog.collectives)
    return fail(SGC_ERROR_INVALID_ARGUMENT, "the library has no collectives, so " + std::to_string(comm.size()) +
                                                " ranks would train apart: compile it with --data-parallel allreduce (or zero1)");
  if (s->gpu) {
    s->gpuStep->setCommunicator(s->comm.get());
    return SGC_OK;
  }
  s->comm = std::move(s->mpi);
  s->spans = allReduceSpans(s->prog, s->address);
  return SGC_OK;
}

/// On a GPU, where each step program's regions lie (`offsets`: each token bucket's, in the arena),
/// and a stepper for each token bucket, with its own CUDA graph.
bool prepareBuckets(sgc_session* s, std::vector<StepArena>& steps, const std::vector<std::array<uint64_t, kNumRegions>>& offsets, std::string& error) {
  std::copy(s->devBase, s->devBase + kNumRegions, steps[0].devBase);
  steps[0].gpuStep = s->gpuStep.get();
  for (size_t b = 1; b < steps.size(); ++b) {
    StepArena& at = steps[b];
    for (int r = 0; r < kNumRegions; ++r) at.devBase[r] = s->gpu->arena() + offsets[b - 1][r];
    std::vector<uint64_t> address;
    for (int i = 0; i < (int)at.prog->tensors.size(); ++i) address.push_back(at.devData(i));
    s->bucketSteps.push_back(std::make_unique<GpuStep>(*at.prog, *s->gpu, std::move(address), b));
    at.gpuStep = s->bucketSteps.back().get();
    if (!at.gpuStep->prepare(error)) return false;
  }
  return true;
}

/// float32 bytes rounded to bfloat16 (to nearest, ties to even; NaN stays NaN).
std::vector<uint8_t> toBf16(const std::vector<uint8_t>& f32) {
  std::vector<uint8_t> out(f32.size() / 2);
  for (size_t i = 0; i < f32.size() / 4; ++i) {
    uint32_t bits;
    std::memcpy(&bits, f32.data() + 4 * i, 4);
    uint16_t h = (bits & 0x7fffffff) > 0x7f800000 ? (uint16_t)((bits >> 16) | 0x40) : (uint16_t)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

} // namespace

sgc_status sgc::rt::fail(sgc_status s, const std::string& msg) {
  lastError = msg;
  return s;
}

bool sgc::rt::runStep(sgc_session* s, bool train, std::string& error) {
  return s->gpu ? runGpuStep(s, train, error) : runCpuStep(s, train, error);
}

bool sgc::rt::runStepOf(sgc_session* s, const StepArena& at, std::string& error) {
  if (at.prog == &s->prog) return runStep(s, true, error);
  if (s->gpu) return at.gpuStep->run(true, error);
  std::vector<void*> args; // a token bucket on the CPU: its kernels (it has no collectives), then its updates
  for (const Launch& l : at.prog->launches) {
    if (l.kernel < 0) continue;
    args.clear();
    for (int a : l.args) args.push_back(at.data(a));
    runKernel(s, l, args);
  }
  for (auto& [target, source] : at.prog->updates) std::memcpy(at.data(target), at.data(source), at.prog->tensors[target].bytes);
  return true;
}

extern "C" {

uint32_t sgc_abi_version(void) { return SGC_ABI_VERSION; }

sgc_status sgc_program_json(const char** json, uint64_t* size) {
  if (!json || !size) return fail(SGC_ERROR_INVALID_ARGUMENT, "json and size must not be NULL");
  *json = sgcrt_program;
  *size = sgcrt_program_size;
  return SGC_OK;
}
const char* sgc_last_error(void) { return lastError.c_str(); }

sgc_status sgc_session_create(const sgc_session_options* options, sgc_session** out) {
  if (!options || !out) return fail(SGC_ERROR_INVALID_ARGUMENT, "options and out must not be NULL");
  if (options->struct_size < offsetof(sgc_session_options, communicator) || options->version != SGC_ABI_VERSION)
    return fail(SGC_ERROR_INVALID_ARGUMENT, "options are not of this ABI version (initialize them with SGC_SESSION_OPTIONS_INIT)");
  sgc_session_options full{}; // fields a host built before them does not pass keep their defaults
  std::memcpy(&full, options, std::min<size_t>(options->struct_size, sizeof full));
  const sgc_session_options* o = &full;
  std::string communicator = o->communicator ? o->communicator : "none";
  if (communicator != "none" && communicator != "mpi" && communicator != "nccl")
    return fail(SGC_ERROR_INVALID_ARGUMENT, "unknown communicator '" + communicator + "' (expected none, mpi or nccl)");
  if (communicator == "nccl" && (o->world_size < 1 || o->rank < 0 || o->rank >= o->world_size))
    return fail(SGC_ERROR_INVALID_ARGUMENT, "rank " + std::to_string(o->rank) + " of world size " + std::to_string(o->world_size) + " is not a rank");
  if (o->timeout_ms < 0) return fail(SGC_ERROR_INVALID_ARGUMENT, "timeout_ms must be 0 or positive");
  std::string device = o->device ? o->device : "cpu";
  int ordinal = -1;
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.find_first_not_of("0123456789", 5) == std::string::npos)
    ordinal = std::atoi(device.c_str() + 5);
  if (device != "cpu" && ordinal < 0) return fail(SGC_ERROR_DEVICE, "unknown device '" + device + "' (expected cpu or cuda:N)");
  if (o->num_threads < 0 || o->num_threads > ThreadPool::maxThreads())
    return fail(SGC_ERROR_INVALID_ARGUMENT, "num_threads must be from 0 (one a core) to " + std::to_string(ThreadPool::maxThreads()) +
                                                " (four a core, at least 64), not " + std::to_string(o->num_threads));
  if (o->cuda_stream && ordinal < 0) return fail(SGC_ERROR_INVALID_ARGUMENT, "cuda_stream is for a cuda:N device, not '" + device + "'");
  try {
    auto s = std::make_unique<sgc_session>();
    s->ordinal = ordinal;
    std::string error;
    if (!parseProgram(sgcrt_program, sgcrt_program_size, sgcrt_weights_size, s->prog, error)) return fail(SGC_ERROR_INTERNAL, error);
    if (s->prog.abi != SGC_ABI_VERSION) return fail(SGC_ERROR_INTERNAL, "the program was compiled for another ABI version");
    std::vector<std::array<uint64_t, kNumRegions>> bucketOffsets;
    uint64_t offsets[kNumRegions], total = regionOffsets(s->prog, offsets, &bucketOffsets);
    std::vector<StepArena> steps(1 + s->prog.buckets.size()); // the step, then its token buckets
    for (size_t b = 0; b < steps.size(); ++b) steps[b].prog = b ? &s->prog.buckets[b - 1] : &s->prog;
    if (ordinal >= 0) {
      std::vector<GpuBlob> blobs;
      for (uint64_t i = 0; i < sgcrt_gpu_blob_count; ++i) blobs.push_back({sgcrt_gpu_blobs[i].name, sgcrt_gpu_blobs[i].data, sgcrt_gpu_blobs[i].size});
      bool gemms = std::any_of(s->prog.launches.begin(), s->prog.launches.end(), [](const Launch& l) { return l.gemm.has_value(); });
      s->gpu = CudaDevice::open(ordinal, blobs, s->prog.kernelNames, total, gemms, o->cuda_stream, error);
      if (!s->gpu) return fail(SGC_ERROR_DEVICE, "device '" + device + "': " + error);
      for (int r = 0; r < kNumRegions; ++r) s->devBase[r] = s->gpu->arena() + offsets[r];
      std::vector<uint64_t> address;
      for (int i = 0; i < (int)s->prog.tensors.size(); ++i) address.push_back(s->devData(i));
      s->gpuStep = std::make_unique<GpuStep>(s->prog, *s->gpu, std::move(address));
      if (!s->gpuStep->prepare(error)) return fail(SGC_ERROR_DEVICE, "device '" + device + "': " + error);
      if (!prepareBuckets(s.get(), steps, bucketOffsets, error)) return fail(SGC_ERROR_DEVICE, "device '" + device + "': " + error);
    } else {
      s->arena = std::aligned_alloc(64, total ? total : 64);
      if (!s->arena) return fail(SGC_ERROR_OUT_OF_MEMORY, "cannot allocate the " + std::to_string(total) + "-byte arena");
      std::memset(s->arena, 0, total);
      for (int r = 0; r < kNumRegions; ++r) s->base[r] = (uint8_t*)s->arena + offsets[r];
      for (size_t b = 0; b < steps.size(); ++b)
        for (int r = 0; r < kNumRegions; ++r) steps[b].base[r] = (uint8_t*)s->arena + (b ? bucketOffsets[b - 1][r] : offsets[r]);
      for (int i = 0; i < (int)s->prog.tensors.size(); ++i) s->address.push_back((uint64_t)s->data(i));
      s->waits = collectiveWaits(s->prog, s->address);
    }
    for (const StepArena& at : steps) // the step's weights, and each token bucket's constants
      for (auto& [t, off] : at.prog->weights)
        if (!s->write(at, t, sgcrt_weights + off, error)) return fail(SGC_ERROR_DEVICE, error);
    for (int i = 0; i < (int)s->prog.tensors.size(); ++i) {
      const TensorDesc& d = s->prog.tensors[i];
      if (d.kind == TensorKind::Result || d.kind == TensorKind::Const || d.shadowOf >= 0) continue; // a copy is the library's own
      s->byName[d.name] = i;
      if (d.kind == TensorKind::Input && i != s->prog.lr) s->lists[SGC_TENSOR_INPUT].push_back(i);
      if (d.kind == TensorKind::Param) s->lists[SGC_TENSOR_PARAMETER].push_back(i);
      if (d.kind == TensorKind::State) s->lists[SGC_TENSOR_STATE].push_back(i);
    }
    s->lists[SGC_TENSOR_OUTPUT].push_back(s->prog.decode ? s->prog.decode->logits : s->prog.loss);
    if (s->prog.decode) {
      s->decode = std::make_unique<DecodeState>(*s->prog.decode, s->prog.tensors[s->prog.decode->logits].bytes);
      s->decode->steps = std::move(steps);
      for (const StepArena& at : s->decode->steps) s->decode->mirror.emplace_back(s->gpu ? at.prog->regions[0] : 0);
    }
    s->inputSet.assign(s->lists[SGC_TENSOR_INPUT].size(), false);
    s->lr = s->prog.lrDefault;
    s->paramsLoaded = s->prog.weightsMode != "none";
    if (s->prog.weightsMode == "external") {
      Dl_info info;
      if (!dladdr((void*)&sgc_abi_version, &info) || !info.dli_fname) return fail(SGC_ERROR_IO, "cannot find where this library lies");
      std::string lib = info.dli_fname;
      std::string path = lib.substr(0, lib.find_last_of('/') + 1) + s->prog.weightsFile;
      if (sgc_status st = sgc_load(s.get(), path.c_str())) return st;
    }
    if (communicator != "none")
      if (sgc_status st = connect(s.get(), *o, o->timeout_ms ? o->timeout_ms : 300000)) return st;
    int ranks = s->comm ? s->comm->size() : 1;
    if (s->prog.world && s->prog.world != ranks)
      return fail(SGC_ERROR_INVALID_ARGUMENT, "the library shards its optimizer state over " + std::to_string(s->prog.world) +
                                                  " ranks (--data-parallel zero1 --ranks " + std::to_string(s->prog.world) + "); this session has " +
                                                  std::to_string(ranks));
    int threads = o->num_threads ? o->num_threads : (int)std::max(1u, std::thread::hardware_concurrency());
    s->pool = std::make_unique<ThreadPool>(threads);
    *out = s.release();
    return SGC_OK;
  } catch (const std::system_error& e) {
    return fail(SGC_ERROR_OUT_OF_MEMORY, std::string("cannot start the session's worker threads: ") + e.what());
  } catch (const std::bad_alloc&) {
    return fail(SGC_ERROR_OUT_OF_MEMORY, "out of memory creating the session");
  } catch (const std::exception& e) {
    return fail(SGC_ERROR_INTERNAL, e.what());
  }
}

void sgc_session_destroy(sgc_session* s) { delete s; }

sgc_status sgc_model_hash(const sgc_session* s, const char** hash) {
  if (!s || !hash) return fail(SGC_ERROR_INVALID_ARGUMENT, "session and hash must not be NULL");
  *hash = s->prog.hash.c_str();
  return SGC_OK;
}

sgc_status sgc_device_description(const sgc_session* s, const char** description) {
  if (!s || !description) return fail(SGC_ERROR_INVALID_ARGUMENT, "session and description must not be NULL");
  if (s->gpu) {
    s->describedAs = s->gpuStep->description();
  } else {
    s->describedAs = "cpu (" + std::to_string(s->pool->size()) + " threads)";
  }
  *description = s->describedAs.c_str();
  return SGC_OK;
}

sgc_status sgc_nccl_unique_id(uint8_t id[128]) {
  if (!id) return fail(SGC_ERROR_INVALID_ARGUMENT, "id must not be NULL");
  NcclId made;
  std::string error;
  if (!ncclUniqueId(made, error)) return fail(SGC_ERROR_COMMUNICATION, error);
  std::memcpy(id, made.bytes, sizeof made.bytes);
  return SGC_OK;
}

sgc_status sgc_rank(const sgc_session* s, int32_t* rank, int32_t* world_size) {
  if (!s || !rank || !world_size) return fail(SGC_ERROR_INVALID_ARGUMENT, "session, rank and world_size must not be NULL");
  *rank = s->comm ? s->comm->rank() : 0;
  *world_size = s->comm ? s->comm->size() : 1;
  return SGC_OK;
}

sgc_status sgc_memory_plan_bytes(const sgc_session* s, uint64_t* bytes) {
  if (!s || !bytes) return fail(SGC_ERROR_INVALID_ARGUMENT, "session and bytes must not be NULL");
  *bytes = planBytes(s->prog);
  return SGC_OK;
}

sgc_status sgc_tensor_count(const sgc_session* s, sgc_tensor_kind kind, int32_t* count) {
  if (!s || !count || kind < SGC_TENSOR_INPUT || kind > SGC_TENSOR_OUTPUT) return fail(SGC_ERROR_INVALID_ARGUMENT, "bad session, kind or count");
  *count = (int32_t)s->lists[kind].size();
  return SGC_OK;
}

sgc_status sgc_tensor_info(const sgc_session* s, sgc_tensor_kind kind, int32_t index, const char** name, DLDataType* dtype,
                           int32_t* ndim, const int64_t** shape) {
  if (!s || kind < SGC_TENSOR_INPUT || kind > SGC_TENSOR_OUTPUT) return fail(SGC_ERROR_INVALID_ARGUMENT, "bad session or kind");
  if (index < 0 || index >= (int32_t)s->lists[kind].size()) return fail(SGC_ERROR_NOT_FOUND, "index " + std::to_string(index) + " is out of range");
  const TensorDesc& d = s->prog.tensors[s->lists[kind][index]];
  if (name) *name = d.name.c_str();
  if (dtype) *dtype = dlType(d.dtype);
  if (ndim) *ndim = (int32_t)d.shape.size();
  if (shape) *shape = d.shape.data();
  return SGC_OK;
}

sgc_status sgc_set_input(sgc_session* s, const char* name, const DLTensor* t) {
  if (!s) return fail(SGC_ERROR_INVALID_ARGUMENT, "session must not be NULL");
  int id = findTensor(s, name, {TensorKind::Input});
  if (id < 0 || id == s->prog.lr) return fail(SGC_ERROR_NOT_FOUND, std::string("no input named '") + (name ? name : "(null)") + "'");
  if (sgc_status st = checkTensor(s, id, t, "input")) return st;
  // Indices are checked where the host can read them; kernels clamp those on the GPU.
  if (t->device.device_type == kDLCPU)
    if (sgc_status st = checkRange(s->prog.tensors[id], (const uint8_t*)t->data + t->byte_offset)) return st;
  std::string error;
  if (!s->write(id, *t, error)) return fail(SGC_ERROR_DEVICE, error);
  auto& inputs = s->lists[SGC_TENSOR_INPUT];
  s->inputSet[std::find(inputs.begin(), inputs.end(), id) - inputs.begin()] = true;
  return SGC_OK;
}

sgc_status sgc_set_learning_rate(sgc_session* s, double lr) {
  if (!s) return fail(SGC_ERROR_INVALID_ARGUMENT, "session must not be NULL");
  if (!(lr >= 0) || !std::isfinite(lr)) return fail(SGC_ERROR_INVALID_ARGUMENT, "the learning rate must be finite and non-negative");
  s->lr = lr;
  return SGC_OK;
}

sgc_status sgc_train_step(sgc_session* s, double* loss) { return step(s, loss, true); }
sgc_status sgc_eval_step(sgc_session* s, double* loss) { return step(s, loss, false); }

sgc_status sgc_tensor_view(const sgc_session* s, const char* name, DLTensor* out) {
  if (!s || !out) return fail(SGC_ERROR_INVALID_ARGUMENT, "session and out must not be NULL");
  int id = findTensor(s, name, {TensorKind::Param, TensorKind::State});
  if (id < 0) return fail(SGC_ERROR_NOT_FOUND, std::string("no parameter or state named '") + (name ? name : "(null)") + "'");
  const TensorDesc& d = s->prog.tensors[id];
  if (d.shards > 1) return fail(SGC_ERROR_INVALID_ARGUMENT, "'" + d.name + "' is sharded across the ranks (--data-parallel zero1): copy it with sgc_get_tensor");
  if (d.kind == TensorKind::Param) s->viewed = true; // what the host writes there, the next step reads: its bf16 copy too
  out->data = s->gpu ? (void*)s->devData(id) : (void*)s->data(id);
  out->device = s->gpu ? DLDevice{kDLCUDA, s->ordinal} : DLDevice{kDLCPU, 0};
  out->ndim = (int32_t)d.shape.size();
  out->dtype = dlType(d.dtype);
  out->shape = const_cast<int64_t*>(d.shape.data());
  out->strides = nullptr;
  out->byte_offset = 0;
  return SGC_OK;
}

sgc_status sgc_trace_next_step(sgc_session* s, const char* path) {
  if (!s) return fail(SGC_ERROR_INVALID_ARGUMENT, "session must not be NULL");
  if (path) { // checked before the step, which a late failure would not undo
    std::string folder = folderOf(outputTarget(path));
    struct stat st {};
    if (stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return fail(SGC_ERROR_IO, std::string("trace file ") + path + ": the folder " + folder + " does not exist");
  }
  s->tracePath = path ? path : "";
  return SGC_OK;
}

sgc_status sgc_get_tensor(const sgc_session* s, const char* name, DLTensor* out) {
  if (!s) return fail(SGC_ERROR_INVALID_ARGUMENT, "session must not be NULL");
  int id = findTensor(s, name, {TensorKind::Param, TensorKind::State});
  if (id < 0) return fail(SGC_ERROR_NOT_FOUND, std::string("no parameter or state named '") + (name ? name : "(null)") + "'");
  if (sgc_status st = checkTensor(s, id, out, "tensor")) return st;
  std::string error;
  if (!s->read(id, *out, error)) return fail(SGC_ERROR_DEVICE, error);
  return SGC_OK;
}

sgc_status sgc_set_tensor(sgc_session* s, const char* name, const DLTensor* t) {
  if (!s) return fail(SGC_ERROR_INVALID_ARGUMENT, "session must not be NULL");
  int id = findTensor(s, name, {TensorKind::Param, TensorKind::State});
  if (id < 0) return fail(SGC_ERROR_NOT_FOUND, std::string("no parameter or state named '") + (name ? name : "(null)") + "'");
  if (sgc_status st = checkTensor(s, id, t, "tensor")) return st;
  const uint8_t* data = (const uint8_t*)t->data + t->byte_offset;
  if (s->prog.tensors[id].name == "sgc.step") {
    if (t->device.device_type != kDLCPU) return fail(SGC_ERROR_DEVICE, "tensor 'sgc.step': set the step counter from host memory");
    if (sgc_status st = checkStep("", data)) return st;
  }
  std::string error;
  if (!s->write(id, *t, error)) return fail(SGC_ERROR_DEVICE, error);
  s->copiesStale = true;
  return SGC_OK;
}

sgc_status sgc_save(const sgc_session* s, const char* path) {
  if (!s || !path) return fail(SGC_ERROR_INVALID_ARGUMENT, "session and path must not be NULL");
  try {
    StFile file;
    int world = s->comm ? s->comm->size() : 1;
    for (int kind : {SGC_TENSOR_PARAMETER, SGC_TENSOR_STATE})
      for (int id : s->lists[kind]) {
        const TensorDesc& d = s->prog.tensors[id];
        StTensor t{d.dtype, d.shape, std::vector<uint8_t>(d.bytes)};
        std::string error;
        if (!s->read(id, t.data.data(), error)) return fail(SGC_ERROR_DEVICE, error);
        if (d.shards > 1 && world > 1) { // ZeRO-1: every rank's shard, in rank order
          std::vector<std::string> all;
          if (!s->comm->allGather(std::string(t.data.begin(), t.data.end()), all, error)) return fail(SGC_ERROR_COMMUNICATION, error);
          t.data.clear();
          for (const std::string& part : all) t.data.insert(t.data.end(), part.begin(), part.end());
          t.shape[0] *= world;
        }
        file[d.name] = std::move(t);
      }
    if (s->comm && s->comm->rank() != 0) return SGC_OK; // rank 0 writes
    std::string error;
    if (!writeSafetensors(path, file, error)) return fail(SGC_ERROR_IO, error);
    return SGC_OK;
  } catch (const std::exception& e) {
    return fail(SGC_ERROR_OUT_OF_MEMORY, e.what());
  }
}

sgc_status sgc_load(sgc_session* s, const char* path) {
  if (!s || !path) return fail(SGC_ERROR_INVALID_ARGUMENT, "session and path must not be NULL");
  try {
    StFile file;
    std::string error;
    if (!readSafetensors(path, file, error)) return fail(SGC_ERROR_IO, error);
    int world = s->comm ? s->comm->size() : 1, rank = s->comm ? s->comm->rank() : 0;
    size_t expected = 0;
    for (int kind : {SGC_TENSOR_PARAMETER, SGC_TENSOR_STATE})
      for (int id : s->lists[kind]) { // check everything before changing anything
        const TensorDesc& d = s->prog.tensors[id];
        auto it = file.find(d.name);
        if (it == file.end() && kind == SGC_TENSOR_STATE) continue; // state is optional: it keeps its values
        if (it == file.end()) return fail(SGC_ERROR_IO, std::string(path) + ": no tensor '" + d.name + "'");
        std::vector<int64_t> want = d.shape; // sharded state: every rank's shard
        if (d.shards > 1) want[0] *= world;
        bool narrowed = it->second.dtype == "F32" && d.dtype == "BF16" && kind == SGC_TENSOR_PARAMETER; // rounded as it loads
        if ((it->second.dtype != d.dtype && !narrowed) || it->second.shape != want)
          return fail(SGC_ERROR_SHAPE_MISMATCH, std::string(path) + ": tensor '" + d.name + "' is " +
                                                    shapeText(it->second.dtype, it->second.shape.data(), (int)it->second.shape.size()) +
                                                    ", expected " + shapeText(d.dtype, want.data(), (int)want.size()));
        if (d.name == "sgc.step")
          if (sgc_status st = checkStep(std::string(path) + ": ", it->second.data.data())) return st;
        ++expected;
      }
    if (file.size() != expected) { // name what the model does not have (a PyTorch state_dict's tied aliases, its counters)
      std::set<std::string> mine;
      for (int kind : {SGC_TENSOR_PARAMETER, SGC_TENSOR_STATE})
        for (int id : s->lists[kind]) mine.insert(s->prog.tensors[id].name);
      std::string extra;
      int listed = 0, count = 0;
      for (const auto& [name, t] : file)
        if (!mine.count(name) && ++count && listed < 4) extra += (listed++ ? ", " : "") + ("'" + name + "'");
      if (count > listed) extra += " and " + std::to_string(count - listed) + " more";
      return fail(SGC_ERROR_IO, std::string(path) + ": holds tensors this model does not have: " + extra);
    }
    for (int kind : {SGC_TENSOR_PARAMETER, SGC_TENSOR_STATE})
      for (int id : s->lists[kind]) {
        const TensorDesc& d = s->prog.tensors[id];
        auto it = file.find(d.name);
        uint64_t mine = d.shards > 1 ? (uint64_t)rank * d.bytes : 0; // sharded state: this rank's part
        if (it != file.end() && it->second.dtype != d.dtype) it->second.data = toBf16(it->second.data);
        if (it != file.end() && !s->write(id, it->second.data.data() + mine, error)) return fail(SGC_ERROR_DEVICE, error);
      }
    s->paramsLoaded = true;
    s->copiesStale = true;
    return SGC_OK;
  } catch (const std::exception& e) {
    return fail(SGC_ERROR_OUT_OF_MEMORY, e.what());
  }
}

} // extern "C"
