// The GPU step (see GpuStep.h).
#include "runtime/GpuStep.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#if SGC_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace sgc::rt {
namespace {

/// An NVTX range around a launch while it is enqueued, named after its ops, so that Nsight Systems
/// and Nsight Compute show sgc's names (steps replayed as a CUDA graph enqueue nothing: the
/// ranges are those of the first steps, or of every step with SGC_CUDA_GRAPHS=0).
struct Range {
#if SGC_NVTX
  explicit Range(const std::string& name) { nvtxRangePushA(name.c_str()); }
  ~Range() { nvtxRangePop(); }
#else
  explicit Range(const std::string&) {}
#endif
};

/// Whether launch `l` has nothing for a GPU to run: its GPU form left empty, its work in an
/// earlier launch's form (codegen/FuseLaunches.h). It is neither launched nor timed.
bool emptyForm(const Launch& l) { return l.gpu && l.gpu->empty(); }

} // namespace

GpuStep::GpuStep(const Program& prog, CudaDevice& gpu, std::vector<uint64_t> address, size_t slot)
    : prog_(prog), gpu_(gpu), address_(std::move(address)), slot_(slot) {}

GpuStep::~GpuStep() {
  if (!profile_.empty()) writeProfile();
}

bool GpuStep::prepare(std::string& error) {
  const char* graphs = std::getenv("SGC_CUDA_GRAPHS");
  if (const char* profile = std::getenv("SGC_PROFILE")) // a token bucket's beside it, as FILE.tokensN
    profile_ = std::string(profile) + (slot_ ? ".tokens" + std::to_string(prog_.decode->tokens) : "");
  if (const char* from = std::getenv("SGC_PROFILE_FROM")) profileFrom_ = std::max(0, std::atoi(from));
  useGraphs_ = !(graphs && std::string(graphs) == "0") && profile_.empty();
  const char* tuning = std::getenv("SGC_GEMM_TUNING");
  tuneGemms_ = !(tuning && std::string(tuning) == "0");
  gemmPlans_.assign(prog_.launches.size(), -1);
  epilogueInGemm_.assign(prog_.launches.size(), false);
  geluInGemm_.assign(prog_.launches.size(), false);
  skipped_.assign(prog_.launches.size(), false);
  if (gpu_.hasGemms() && !prepareGemms(error)) return false;
  return kernelsCarried(error);
}

bool GpuStep::kernelsCarried(std::string& error) const {
  auto carried = [&](int kernel, size_t i) {
    if (kernel < 0 || gpu_.hasKernel(kernel)) return true;
    std::string name = kernel < (int)prog_.kernelNames.size() ? prog_.kernelNames[kernel] : std::to_string(kernel);
    error = "launch " + std::to_string(i) + " needs kernel " + name + ", which this library's GPU code does not carry";
    return false;
  };
  for (size_t i = 0; i < prog_.launches.size(); ++i) { // what enqueue launches
    const Launch& l = prog_.launches[i];
    if (l.collective || skipped_[i]) continue;
    if (l.gpu) {
      for (const KernelCall& c : *l.gpu)
        if (!carried(c.kernel, i)) return false;
    } else if ((gemmPlans_[i] < 0 && !carried(l.kernel, i)) || (gemmPlans_[i] >= 0 && !epilogueInGemm_[i] && !carried(l.epilogue.kernel, i))) {
      return false;
    }
  }
  return true;
}

bool GpuStep::prepareGemms(std::string& error) {
  for (size_t i = 0; i < prog_.launches.size(); ++i)
    if (const auto& g = prog_.launches[i].gemm) {
      // Best first: the bias and the GELU in cuBLASLt's epilogue, then the bias alone, then the
      // product alone (each when cuBLASLt has an algorithm for it); what it does not compute,
      // the launch's epilogue kernel and the GELU's own launch do.
      std::string unused;
      // Timing candidates writes what they compute: only into a step's own results, never into
      // what lives across steps (a parameter, the optimizer's state or bf16 copies, an input).
      auto transient = [&](int id) { return id < 0 || (prog_.tensors[id].kind == TensorKind::Result && prog_.tensors[id].shadowOf < 0); };
      bool tune = tuneGemms_ && transient(g->y) && (!g->gelu || (transient(g->gelu->result) && transient(g->gelu->aux)));
      if (const auto& f = g->gelu) {
        uint64_t bias = f->bias >= 0 ? address_[f->bias] : 0, aux = f->aux >= 0 ? address_[f->aux] : 0;
        gemmPlans_[i] = gpu_.prepareGemm(*g, address_[g->a], address_[g->b], address_[f->result], bias, true, aux, tune, unused);
        geluInGemm_[i] = epilogueInGemm_[i] = gemmPlans_[i] >= 0; // with the bias the epilogue kernel adds, if any
        if (geluInGemm_[i] && f->skip >= 0) skipped_[f->skip] = true;
      }
      if (gemmPlans_[i] < 0 && g->bias >= 0) {
        gemmPlans_[i] = gpu_.prepareGemm(*g, address_[g->a], address_[g->b], address_[g->y], address_[g->bias], false, 0, tune, unused);
        epilogueInGemm_[i] = gemmPlans_[i] >= 0;
      }
      if (gemmPlans_[i] < 0) gemmPlans_[i] = gpu_.prepareGemm(*g, address_[g->a], address_[g->b], address_[g->y], 0, false, 0, tune, error);
      if (gemmPlans_[i] < 0) return false;
    }
  return true;
}

void GpuStep::setCommunicator(Communicator* comm) {
  comm_ = comm;
  spans_ = allReduceSpans(prog_, address_);
  waits_ = collectiveWaits(prog_, address_);
}

bool GpuStep::onCommStream(const Collective& c) const { return comm_ && c.op != "shard"; }

bool GpuStep::collective(size_t i, const Collective& c, std::string& error) {
  bool comm = onCommStream(c), profiling = !profile_.empty() || traceNext_;
  if (!comm_ && c.op == "allreduce") return true; // one rank: nothing to do
  if (comm && !gpu_.commFork(error)) return false;
  if (profiling && !gpu_.recordEvent(2 * i, error, comm)) return false;
  timed_[i] = profiling;
  int in = c.tensors[0], out = c.tensors.back(), handle = 0;
  uint64_t bytes = prog_.tensors[out].bytes;
  auto span = [&](int id) { return tensorSpan(prog_, id, address_[id]); };
  bool ok = c.op == "allreduce"        ? comm_->start(spans_[i], c.average, handle, error)
            : c.op == "shard"          ? gpu_.copy(address_[out], address_[in] + (uint64_t)(comm_ ? comm_->rank() : 0) * bytes, bytes, error)
            : !comm_                   ? gpu_.copy(address_[out], address_[in], bytes, error) // one rank: the shard is the whole
            : c.op == "reduce_scatter" ? comm_->startReduceScatter(span(in), span(out), c.average, handle, error)
                                       : comm_->startAllGather(span(in), span(out), handle, error);
  if (!ok || (profiling && !gpu_.recordEvent(2 * i + 1, error, comm))) return false;
  return !comm || gpu_.commDone(i, error);
}

bool GpuStep::launch(int kernel, const std::vector<int>& ids, bool serial, int64_t extent, std::string& error, int threads, int64_t shared) {
  args_.clear();
  for (int a : ids) args_.push_back(address_[a]);
  return gpu_.launch(kernel, args_, serial, extent, threads, shared, error);
}

bool GpuStep::enqueue(bool train, std::string& error) {
  bool profiling = !profile_.empty() || traceNext_;
  size_t n = prog_.launches.size(); // profile events: 2i and 2i+1 around launch i; 2n and 2n+1 around the step
  timed_.assign(n, false);
  if (profiling && !gpu_.recordEvent(2 * n, error)) return false;
  std::vector<bool> started(n, false); // collectives enqueued and not yet waited for
  for (size_t i = 0; i < n; ++i) {
    const Launch& l = prog_.launches[i];
    for (int c : comm_ ? waits_[i] : std::vector<int>{}) {
      if (!started[c]) continue;
      started[c] = false;
      if (!gpu_.waitComm(c, error)) return false;
    }
    if ((!train && !l.forward) || skipped_[i] || l.refresh || emptyForm(l)) continue;
    Range range(l.label.empty() ? "launch " + std::to_string(i) : l.label);
    if (l.collective) { // a launch is a collective or kernels, never both
      if (!collective(i, *l.collective, error)) return false;
      started[i] = onCommStream(*l.collective);
      continue;
    }
    if (profiling && !gpu_.recordEvent(2 * i, error)) return false;
    if (l.gpu) {
      for (const KernelCall& c : *l.gpu)
        if (!launch(c.kernel, c.args, c.serial, c.extent / c.vector, error, c.threads, c.shared)) return false;
    } else if (gemmPlans_[i] < 0) {
      if (!launch(l.kernel, l.args, l.serial, l.extent / l.vector, error)) return false;
    } else {
      const Gemm& g = *l.gemm;
      if (!gpu_.gemm(gemmPlans_[i], address_[g.a], address_[g.b], address_[geluInGemm_[i] ? g.gelu->result : g.y], error)) return false;
      if (l.epilogue.kernel >= 0 && !epilogueInGemm_[i] && !launch(l.epilogue.kernel, l.epilogue.args, l.epilogue.serial, l.epilogue.extent / l.epilogue.vector, error)) return false;
    }
    if (profiling && !gpu_.recordEvent(2 * i + 1, error)) return false;
    timed_[i] = profiling;
  }
  for (size_t c = 0; c < n; ++c) // the communication stream joins the compute stream (as a graph capture needs)
    if (started[c] && !gpu_.waitComm(c, error)) return false;
  if (train)
    for (auto& [target, source] : prog_.updates)
      if (!gpu_.copy(address_[target], address_[source], prog_.tensors[target].bytes, error)) return false;
  if (traceNext_) {
    traceNext_ = false;
    if (!gpu_.recordEvent(2 * n + 1, error) || !gpu_.synchronize(error)) return false;
    trace_.clear();
    for (size_t i = 0; i < n; ++i)
      if (timed_[i]) {
        const Launch& l = prog_.launches[i];
        bool comm = l.collective && onCommStream(*l.collective);
        int k = l.gpu && !l.gpu->empty() ? (*l.gpu)[0].kernel : l.kernel;
        std::string kernel = l.collective ? l.collective->op : gemmPlans_[i] >= 0 ? "cublasLt"
                             : k >= 0 && k < (int)prog_.kernelNames.size() ? prog_.kernelNames[k] : "";
        trace_.push_back({i, comm, 1e3 * gpu_.elapsedMs(2 * n, 2 * i), 1e3 * gpu_.elapsedMs(2 * n, 2 * i + 1), kernel});
      }
    if (profile_.empty()) return true;
  }
  if (profiling && train && stepsSeen_++ < profileFrom_) return gpu_.synchronize(error); // not profiled yet
  if (profiling && train) {
    if (!gpu_.recordEvent(2 * n + 1, error) || !gpu_.synchronize(error)) return false;
    profileMs_.resize(n + 1, 0.0);
    profileStartMs_.resize(n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      profileMs_[i] += gpu_.elapsedMs(2 * i, 2 * i + 1);
      profileStartMs_[i] = gpu_.elapsedMs(2 * n, 2 * i); // this step's: where each launch ran
    }
    profileMs_[n] += gpu_.elapsedMs(2 * n, 2 * n + 1);
    ++profileSteps_;
  }
  return true;
}

bool GpuStep::refresh(std::string& error) {
  for (const Launch& l : prog_.launches)
    if (l.refresh && !launch(l.kernel, l.args, l.serial, l.extent / l.vector, error)) return false;
  return true;
}

bool GpuStep::run(bool train, std::string& error) {
  if (!train || traceNext_) return enqueue(train, error) && (!comm_ || comm_->idle(error)); // launch by launch
  bool capture = useGraphs_ && !gpu_.captured(slot_) && trainSteps_++ >= 1;
  if (capture) {
    if (!gpu_.beginCapture(error)) return false;
    if (!enqueue(true, error)) { // nothing of it is kept: a later step captures again, whole
      gpu_.abandonCapture(slot_);
      return false;
    }
    if (!gpu_.endCapture(slot_, error)) return false;
  }
  if (gpu_.captured(slot_)) {
    if (!gpu_.replay(slot_, error)) return false;
  } else if (!enqueue(true, error)) {
    return false;
  }
  return !comm_ || comm_->idle(error); // bounded: a dead peer fails the step instead of hanging it
}

std::string GpuStep::description() const {
  int gemms = (int)std::count_if(gemmPlans_.begin(), gemmPlans_.end(), [](int p) { return p >= 0; });
  std::string tuning = gpu_.tuningNote();
  return gpu_.description() + "; " + std::to_string(gemms) + " GEMMs through cuBLASLt" + (tuning.empty() ? "" : " (" + tuning + ")") +
         "; CUDA graph: " + (!useGraphs_ ? "off" : gpu_.captured(slot_) ? "replayed" : "from the second training step");
}

void GpuStep::writeProfile() const {
  FILE* f = std::fopen(profile_.c_str(), "w");
  if (!f) return;
  // tensor_bytes: launchTensorBytes; flops: a product's 2 m n k a batch, a fused attention's (Launch::flops).
  std::fprintf(f, "launch\tops\tkind\tms_per_step\tstart_ms\tstream\ttensor_bytes\tflops\n");
  double steps = std::max(1, profileSteps_);
  for (size_t i = 0; i + 1 < profileMs_.size(); ++i) {
    const Launch& l = prog_.launches[i];
    if (l.refresh || skipped_[i] || emptyForm(l)) continue; // not a step's, or its work in a product's epilogue or an earlier form
    const char* kind = l.collective ? "collective" : gemmPlans_[i] >= 0 ? "cublaslt" : l.gpu ? "gpu-form" : "kernel";
    const char* stream = l.collective && onCommStream(*l.collective) ? "communication" : "compute";
    std::string ops = l.with.empty() ? l.label : l.label + " (with " + l.with + ")"; // its time is theirs too
    const auto& g = l.gemm;
    double flops = g ? 2.0 * (double)g->m * (double)g->n * (double)g->k * (double)g->batch : l.flops;
    std::fprintf(f, "%zu\t%s\t%s\t%.6f\t%.6f\t%s\t%llu\t%.0f\n", i, ops.c_str(), kind, profileMs_[i] / steps, profileStartMs_[i], stream,
                 (unsigned long long)launchTensorBytes(prog_, l, true), flops);
  }
  if (!profileMs_.empty()) std::fprintf(f, "step\t-\tstep\t%.6f\t0\tcompute\n", profileMs_.back() / steps);
  std::fclose(f);
}

} // namespace sgc::rt
