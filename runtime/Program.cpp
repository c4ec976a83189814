// Parsing and checking of the program description (see Program.h).
#include "runtime/Program.h"

#include "runtime/Safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace sgc::rt {
namespace {

bool fail(std::string& error, const std::string& msg) {
  error = "the compiled program is malformed: " + msg;
  return false;
}

TensorKind kindOf(const std::string& k) {
  if (k == "input") return TensorKind::Input;
  if (k == "param") return TensorKind::Param;
  if (k == "state") return TensorKind::State;
  if (k == "const") return TensorKind::Const;
  return TensorKind::Result;
}

bool parseTensors(const nlohmann::json& j, Program& p, std::string& error) {
  for (const auto& t : j.at("tensors")) {
    TensorDesc d{t.at("name"), kindOf(t.at("kind")), t.at("region"), t.at("offset"), t.at("bytes"), t.at("dtype"), t.at("shape"),
                 t.value("shards", int64_t(1)), std::nullopt};
    if (d.shards < 1 || (d.shards > 1 && (d.kind != TensorKind::State || d.shape.size() != 1)))
      return fail(error, "tensor " + d.name + " has a bad shard count (only flat state is sharded)");
    if (t.contains("live")) d.first = t.at("live").at(0), d.last = t.at("live").at(1);
    d.shadowOf = t.value("shadow_of", -1);
    if (t.contains("range")) {
      const auto& r = t.at("range");
      d.range = TensorDesc::Range{r.at("min"), r.at("max"), r.contains("ignore") ? std::optional<int64_t>(r.at("ignore")) : std::nullopt};
    }
    if (d.region < 0 || d.region >= kNumRegions) return fail(error, "tensor " + d.name + " has no valid region");
    if (d.offset > p.regions[d.region] || d.bytes > p.regions[d.region] - d.offset) return fail(error, "tensor " + d.name + " leaves its region");
    if (d.offset % kTensorAlignment) return fail(error, "tensor " + d.name + " is not " + std::to_string(kTensorAlignment) + "-byte aligned");
    uint64_t numel = 1;
    for (int64_t s : d.shape) {
      if (s < 0) return fail(error, "tensor " + d.name + " has a negative dim");
      numel *= (uint64_t)s;
    }
    if (stDTypeSize(d.dtype) == 0 || numel * stDTypeSize(d.dtype) != d.bytes) return fail(error, "tensor " + d.name + " has inconsistent size");
    p.tensors.push_back(std::move(d));
  }
  for (const TensorDesc& d : p.tensors) { // a bf16 copy: state of its parameter's shape
    if (d.shadowOf < 0) continue;
    const TensorDesc* of = d.shadowOf < (int)p.tensors.size() ? &p.tensors[d.shadowOf] : nullptr;
    if (d.kind != TensorKind::State || d.dtype != "BF16" || !of || of->kind != TensorKind::Param || of->dtype != "F32" || of->shape != d.shape)
      return fail(error, "tensor " + d.name + " is no parameter's bf16 copy");
  }
  return true;
}

bool validTensor(const Program& p, int id) { return id >= 0 && id < (int)p.tensors.size(); }

/// Whether tensor `id` has `dtype` and holds `count` matrices of rows x cols at `stride` elements apart.
bool holds(const Program& p, int id, const std::string& dtype, int64_t count, int64_t stride, int64_t rows, int64_t cols) {
  if (!validTensor(p, id) || p.tensors[id].dtype != dtype || count < 1 || stride < 0 || rows < 1 || cols < 1) return false;
  uint64_t size = stDTypeSize(dtype);
  long double last = (long double)(count - 1) * stride + (long double)rows * cols; // elements touched, without overflow
  return last * size <= (long double)p.tensors[id].bytes;
}

bool parseGemm(const nlohmann::json& j, const Program& p, Gemm& g, std::string& error) {
  g = Gemm{j.at("a"), j.at("b"), j.at("y"), j.at("m"), j.at("n"), j.at("k"), j.at("batch"), j.at("stride_a"), j.at("stride_b"),
           j.at("trans_a"), j.at("trans_b"), j.at("dtype"), -1, std::nullopt};
  g.bias = j.value("bias", -1);
  if (g.dtype != "F32" && g.dtype != "BF16" && g.dtype != "F16") return fail(error, "a GEMM of dtype " + g.dtype);
  if (!holds(p, g.a, g.dtype, g.batch, g.strideA, g.m, g.k) || !holds(p, g.b, g.dtype, g.batch, g.strideB, g.k, g.n) ||
      !holds(p, g.y, g.dtype, g.batch, g.m * g.n, g.m, g.n))
    return fail(error, "a GEMM's operands do not fit their tensors");
  if (g.bias != -1 && !holds(p, g.bias, g.dtype, 1, 0, 1, g.n)) return fail(error, "a GEMM's bias does not fit its tensor");
  if (j.contains("gelu")) {
    const auto& e = j.at("gelu");
    g.gelu = Gemm::Gelu{e.at("result"), e.at("aux"), e.at("bias"), e.at("skip")};
    const Gemm::Gelu& f = *g.gelu;
    if (!holds(p, f.result, g.dtype, g.batch, g.m * g.n, g.m, g.n) || (f.aux != -1 && f.aux != g.y) ||
        (f.bias != -1 && !holds(p, f.bias, g.dtype, 1, 0, 1, g.n)))
      return fail(error, "a GEMM's GELU does not fit its tensors");
  }
  return true;
}

bool parseCall(const nlohmann::json& c, const Program& p, KernelCall& k, std::string& error) {
  k = KernelCall{c.at("kernel"), c.at("serial"), c.at("extent"), c.value("vector", int64_t(1)), c.at("args").get<std::vector<int>>(),
                 c.value("threads", 256), c.value("shared", int64_t(0))};
  if (k.kernel < 0 || k.kernel >= p.numKernels || k.extent < 0) return fail(error, "a launch names no kernel");
  if (k.vector < 1) return fail(error, "a launch has a bad vector width");
  if (k.threads < 32 || k.threads > 1024 || k.threads % 32) return fail(error, "a launch has a bad block size");
  if (k.shared < 0 || k.shared > (227 << 10)) return fail(error, "a launch asks for more shared memory than a GPU block has");
  for (int a : k.args)
    if (!validTensor(p, a)) return fail(error, "a launch names no tensor");
  return true;
}

bool parseCollective(const nlohmann::json& c, const Program& p, Collective& C, std::string& error) {
  C = Collective{c.at("op"), c.at("average"), c.value("world", int64_t(0)), c.at("tensors").get<std::vector<int>>()};
  for (int t : C.tensors)
    if (!validTensor(p, t) || (p.tensors[t].dtype != "F32" && p.tensors[t].dtype != "F64" && p.tensors[t].dtype != "BF16"))
      return fail(error, "a collective names no floating-point tensor");
  if (C.op == "allreduce") return true;
  if (C.op != "reduce_scatter" && C.op != "all_gather" && C.op != "shard") return fail(error, "an unknown collective");
  if (C.tensors.size() != 2 || C.world < 1) return fail(error, "a " + C.op + " needs an input, a result and a world size");
  const TensorDesc &in = p.tensors[C.tensors[0]], &out = p.tensors[C.tensors[1]];
  uint64_t whole = C.op == "all_gather" ? out.bytes : in.bytes, part = C.op == "all_gather" ? in.bytes : out.bytes;
  if (in.dtype != out.dtype || whole != part * (uint64_t)C.world) return fail(error, "a " + C.op + "'s tensors do not match its world size");
  return true;
}

bool parseLaunch(const nlohmann::json& l, const Program& p, Launch& L, std::string& error) {
  L = Launch{l.at("kernel"), l.at("serial"), l.at("forward"), l.at("extent"), l.value("vector", int64_t(1)), l.at("args").get<std::vector<int>>(),
             l.value("label", ""), std::nullopt, {}, std::nullopt, std::nullopt};
  L.refresh = l.value("refresh", false);
  L.with = l.value("with", "");
  L.flops = l.value("flops", 0.0);
  if (!(L.flops >= 0) || !std::isfinite(L.flops)) return fail(error, "a launch's flops are not a finite count");
  if (l.contains("collective") && !parseCollective(l.at("collective"), p, L.collective.emplace(), error)) return false;
  // No kernel: a collective, or GPU-only work (its GPU form; a CPU has nothing to run).
  if ((L.kernel < 0 && !L.collective && !l.contains("gpu")) || L.kernel >= p.numKernels || L.extent < 0) return fail(error, "a launch names no kernel");
  if (L.vector < 1) return fail(error, "a launch has a bad vector width");
  for (int a : L.args)
    if (!validTensor(p, a)) return fail(error, "a launch names no tensor");
  if (l.contains("gemm") && !parseGemm(l.at("gemm"), p, L.gemm.emplace(), error)) return false;
  if (l.contains("epilogue") && (!L.gemm || !parseCall(l.at("epilogue"), p, L.epilogue, error))) return fail(error, "a bad GEMM epilogue");
  if (l.contains("gpu")) {
    L.gpu.emplace();
    for (const auto& c : l.at("gpu"))
      if (!parseCall(c, p, L.gpu->emplace_back(), error)) return false;
  }
  // A refresh reads a parameter and writes its copy: a kernel of its own, nothing a step needs.
  if (L.refresh && (L.kernel < 0 || L.gpu || L.gemm || L.collective)) return fail(error, "a refresh launch is not a kernel alone");
  return true;
}

/// Whether tensor `id` is a `dtype` tensor of `shape` (-1 in it: any size).
bool isTensor(const Program& p, int id, std::initializer_list<const char*> dtypes, const std::vector<int64_t>& shape) {
  if (!validTensor(p, id)) return false;
  const TensorDesc& t = p.tensors[id];
  if (std::none_of(dtypes.begin(), dtypes.end(), [&](const char* d) { return t.dtype == d; }) || t.shape.size() != shape.size()) return false;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] >= 0 && t.shape[i] != shape[i]) return false;
  return true;
}

bool parseDecode(const nlohmann::json& j, const Program& p, Decode& d, std::string& error) {
  d.tokens = j.at("tokens"), d.seqs = j.at("seqs"), d.blockSize = j.at("block_size"), d.blocks = j.at("blocks"), d.maxBlocks = j.at("max_blocks"), d.maxContext = j.at("max_context");
  d.ids = j.at("ids"), d.positions = j.at("positions"), d.logits = j.at("logits"), d.tables = j.at("tables"), d.seq = j.at("seq"), d.pos = j.at("pos");
  d.pools = j.at("pools").get<std::vector<int>>();
  d.next = j.value("next", -1);
  if (j.contains("sample")) {
    auto ids = j.at("sample").get<std::vector<int>>();
    if (ids.size() != 4) return fail(error, "decode: bad sampling inputs");
    d.temperature = ids[0], d.topK = ids[1], d.topP = ids[2], d.seed = ids[3];
  }
  const int64_t limit = 1 << 30;
  for (int64_t v : {d.tokens, d.seqs, d.blockSize, d.blocks, d.maxBlocks})
    if (v < 1 || v > limit) return fail(error, "decode: sizes out of range");
  if (d.maxBlocks * d.blockSize > limit || d.maxContext < 1 || d.maxContext > d.maxBlocks * d.blockSize) return fail(error, "decode: a bad context length");
  // One token a row: [tokens, 1], or a plain model's [1, tokens] (its tokens along its sequence).
  auto perToken = [&](int id) { return isTensor(p, id, {"I64", "I32"}, {d.tokens, 1}) || isTensor(p, id, {"I64", "I32"}, {1, d.tokens}); };
  if (!perToken(d.ids) || (d.positions >= 0 && !perToken(d.positions)) ||
      !isTensor(p, d.tables, {"I32"}, {d.seqs, d.maxBlocks}) || !isTensor(p, d.seq, {"I32"}, {d.tokens}) || !isTensor(p, d.pos, {"I32"}, {d.tokens}))
    return fail(error, "decode: bad token, position or table tensors");
  const TensorDesc* logits = validTensor(p, d.logits) ? &p.tensors[d.logits] : nullptr;
  auto rows = [&](const std::vector<int64_t>& s) { // [tokens, vocab], [tokens, 1, vocab] or [1, tokens, vocab]
    return (s.size() == 2 && s[0] == d.tokens) || (s.size() == 3 && ((s[0] == d.tokens && s[1] == 1) || (s[0] == 1 && s[1] == d.tokens)));
  };
  if (!logits || (logits->dtype != "F32" && logits->dtype != "BF16" && logits->dtype != "F16") || !rows(logits->shape))
    return fail(error, "decode: bad logits");
  d.vocab = logits->shape.back();
  if (d.next >= 0 && (!validTensor(p, d.next) || p.tensors[d.next].dtype != "I64" || p.tensors[d.next].bytes != (uint64_t)d.tokens * 8))
    return fail(error, "decode: bad next tokens");
  if (d.temperature >= 0 && (!isTensor(p, d.temperature, {"F32"}, {d.tokens}) || !isTensor(p, d.topK, {"I32"}, {d.tokens}) ||
                            !isTensor(p, d.topP, {"F32"}, {d.tokens}) || !isTensor(p, d.seed, {"I64"}, {d.tokens}) || d.next < 0))
    return fail(error, "decode: bad sampling inputs");
  if (d.pools.empty()) return fail(error, "decode: no cache");
  for (int pool : d.pools)
    if (!isTensor(p, pool, {"F32", "BF16", "F16"}, {d.blocks, 2, d.blockSize, -1, -1}) || p.tensors[pool].kind != TensorKind::State)
      return fail(error, "decode: a bad cache pool");
  // The runtime stages a step's inputs region whole (runtime/Decode.cpp): it holds these alone.
  std::vector<int> staged{d.ids, d.positions, d.tables, d.seq, d.pos, d.temperature, d.topK, d.topP, d.seed};
  for (int i = 0; i < (int)p.tensors.size(); ++i)
    if (p.tensors[i].region == 0 && std::find(staged.begin(), staged.end(), i) == staged.end())
      return fail(error, "decode: the inputs region holds " + p.tensors[i].name + ", which a step does not feed");
  return true;
}

} // namespace

std::vector<std::vector<int>> collectiveWaits(const Program& p, const std::vector<uint64_t>& address) {
  auto touched = [&](const Launch& l) {
    std::vector<int> ids = l.args;
    if (l.gemm) ids.insert(ids.end(), {l.gemm->a, l.gemm->b, l.gemm->y});
    if (l.gemm && l.gemm->bias >= 0) ids.push_back(l.gemm->bias);
    ids.insert(ids.end(), l.epilogue.args.begin(), l.epilogue.args.end());
    if (l.gpu)
      for (const KernelCall& c : *l.gpu) ids.insert(ids.end(), c.args.begin(), c.args.end());
    return ids;
  };
  auto overlap = [&](int a, int b) {
    return address[a] < address[b] + p.tensors[b].bytes && address[b] < address[a] + p.tensors[a].bytes;
  };
  std::vector<std::vector<int>> waits(p.launches.size());
  std::vector<int> open; // collectives not yet waited for
  for (size_t i = 0; i < p.launches.size(); ++i) {
    std::vector<int> ids = touched(p.launches[i]);
    if (p.launches[i].collective) ids.insert(ids.end(), p.launches[i].collective->tensors.begin(), p.launches[i].collective->tensors.end());
    for (auto c = open.begin(); c != open.end();) {
      bool needed = false;
      for (int t : p.launches[*c].collective->tensors)
        for (int id : ids) needed = needed || overlap(t, id);
      if (needed) {
        waits[i].push_back(*c);
        c = open.erase(c);
      } else {
        ++c;
      }
    }
    if (p.launches[i].collective) open.push_back((int)i);
  }
  return waits;
}

uint64_t launchTensorBytes(const Program& p, const Launch& l, bool onGpu) {
  std::set<int> tensors;
  if (onGpu && l.gpu) { // what the GPU runs instead; an emptied form (its work in an earlier launch) runs nothing
    for (const KernelCall& c : *l.gpu) tensors.insert(c.args.begin(), c.args.end());
  } else {
    tensors.insert(l.args.begin(), l.args.end());
    if (const auto& g = l.gemm; onGpu && g) {
      tensors.insert(l.epilogue.args.begin(), l.epilogue.args.end());
      tensors.insert({g->a, g->b, g->y});
    }
  }
  uint64_t bytes = 0;
  for (int t : tensors)
    if (t >= 0) bytes += p.tensors[t].bytes;
  return bytes;
}

uint64_t planBytes(const Program& p) {
  uint64_t total = 0, activations = p.regions[5];
  for (uint64_t r : p.regions) total += r;
  for (const Program& b : p.buckets) {
    total += b.regions[0] + b.regions[3];
    activations = std::max(activations, b.regions[5]);
  }
  return total + activations - p.regions[5];
}

uint64_t regionOffsets(const Program& p, uint64_t offsets[kNumRegions], std::vector<std::array<uint64_t, kNumRegions>>* buckets) {
  auto rounded = [](uint64_t bytes) { return (bytes + 63) / 64 * 64; };
  uint64_t total = 0;
  for (int r = 0; r < kNumRegions; ++r) {
    offsets[r] = total;
    uint64_t bytes = p.regions[r];
    if (r == 5)
      for (const Program& b : p.buckets) bytes = std::max(bytes, b.regions[r]); // one activations region for all
    total += rounded(bytes);
  }
  if (!buckets) return total;
  buckets->clear();
  for (const Program& b : p.buckets) {
    auto& at = buckets->emplace_back();
    std::copy(offsets, offsets + kNumRegions, at.begin());
    for (int r : {0, 3}) { // inputs, constants: its own
      at[r] = total;
      total += rounded(b.regions[r]);
    }
  }
  return total;
}

namespace {

/// One program's fields but its kernels (p.numKernels and p.kernelNames are set).
bool parseBody(const nlohmann::json& j, uint64_t weightsBytes, Program& p, std::string& error) {
  try {
    p.abi = j.at("abi");
    p.hash = j.at("hash");
    p.alignment = j.at("alignment");
    auto regions = j.at("regions");
    if (regions.size() != kNumRegions) return fail(error, "wrong number of regions");
    for (int r = 0; r < kNumRegions; ++r) p.regions[r] = regions[r];
    if (!parseTensors(j, p, error)) return false;
    for (const auto& l : j.at("launches")) {
      Launch L;
      if (!parseLaunch(l, p, L, error)) return false;
      p.collectives = p.collectives || L.collective.has_value();
      if (L.collective && L.collective->world) {
        if (p.world && p.world != L.collective->world) return fail(error, "collectives of different world sizes");
        p.world = L.collective->world;
      }
      p.launches.push_back(std::move(L));
    }
    for (size_t i = 0; i < p.launches.size(); ++i) // a GELU's launch comes after its GEMM's
      if (const auto& g = p.launches[i].gemm; g && g->gelu && g->gelu->skip != -1 && (g->gelu->skip <= (int64_t)i || g->gelu->skip >= (int64_t)p.launches.size()))
        return fail(error, "a GEMM's GELU names a bad launch");
    for (const auto& u : j.at("updates")) {
      int t = u.at(0), s = u.at(1);
      if (!validTensor(p, t) || !validTensor(p, s) || p.tensors[t].bytes != p.tensors[s].bytes) return fail(error, "a bad update");
      p.updates.push_back({t, s});
    }
    for (const auto& w : j.at("weights")) {
      int t = w.at(0);
      uint64_t off = w.at(1);
      if (!validTensor(p, t) || off > weightsBytes || p.tensors[t].bytes > weightsBytes - off) return fail(error, "weights out of range");
      p.weights.push_back({t, off});
    }
    p.loss = j.at("loss");
    p.lr = j.at("lr");
    p.step = j.at("step");
    p.lrDefault = j.at("lr_default");
    p.weightsMode = j.at("weights_mode");
    p.weightsFile = j.at("weights_file");
    if (p.weightsMode != "embedded" && p.weightsMode != "external" && p.weightsMode != "none") return fail(error, "unknown weights mode");
    if (p.weightsFile.find('/') != std::string::npos) return fail(error, "the weights file must be a name beside the library");
    if (j.contains("decode")) {
      p.decode.emplace();
      if (!parseDecode(j.at("decode"), p, *p.decode, error)) return false;
    } else if (!validTensor(p, p.loss) || !validTensor(p, p.lr) || !validTensor(p, p.step)) {
      return fail(error, "no loss, lr or step");
    }
  } catch (const nlohmann::json::exception& e) {
    return fail(error, e.what());
  }
  return true;
}

/// Whether tensors a and b (of programs p and q) are one tensor: the same name, kind, place and type.
bool sameTensor(const Program& p, int a, const Program& q, int b) {
  const TensorDesc &x = p.tensors[a], &y = q.tensors[b];
  return x.name == y.name && x.kind == y.kind && x.region == y.region && x.offset == y.offset && x.bytes == y.bytes && x.dtype == y.dtype &&
         x.shape == y.shape;
}

/// A token bucket `b` of the decode step `p` (the last bucket so far `before`, or null): a decode
/// step of fewer tokens over the same cache, whose parameters and state are p's.
bool checkBucket(const Program& p, const Program* before, const Program& b, std::string& error) {
  const Decode &d = *p.decode, *e = b.decode ? &*b.decode : nullptr;
  if (!e || e->tokens >= d.tokens || (before && e->tokens <= before->decode->tokens)) return fail(error, "a token bucket is no smaller decode step");
  if (e->seqs != d.seqs || e->blockSize != d.blockSize || e->blocks != d.blocks || e->maxBlocks != d.maxBlocks || e->maxContext != d.maxContext ||
      e->vocab != d.vocab || (e->next < 0) != (d.next < 0) || (e->temperature < 0) != (d.temperature < 0) || (e->positions < 0) != (d.positions < 0) ||
      e->pools.size() != d.pools.size())
    return fail(error, "a token bucket's cache or outputs differ from its step's");
  for (int r : {1, 2, 4}) // params, state, grads: p's
    if (b.regions[r] != p.regions[r]) return fail(error, "a token bucket's parameters or state differ from its step's");
  for (size_t i = 0; i < d.pools.size(); ++i)
    if (!sameTensor(p, d.pools[i], b, e->pools[i])) return fail(error, "a token bucket's cache differs from its step's");
  std::map<std::string, int> byName;
  for (int i = 0; i < (int)p.tensors.size(); ++i) byName[p.tensors[i].name] = i;
  for (int i = 0; i < (int)b.tensors.size(); ++i) {
    const TensorDesc& t = b.tensors[i];
    if (t.kind != TensorKind::Param && t.kind != TensorKind::State) continue;
    auto it = byName.find(t.name);
    if (it == byName.end() || !sameTensor(p, it->second, b, i)) return fail(error, "a token bucket places " + t.name + " apart from its step");
  }
  for (auto [t, off] : b.weights)
    if (b.tensors[t].kind != TensorKind::Const) return fail(error, "a token bucket carries weights besides its constants");
  if (b.collectives) return fail(error, "a token bucket has collectives");
  return true;
}

} // namespace

bool parseProgram(const char* json, size_t size, uint64_t weightsBytes, Program& p, std::string& error) {
  nlohmann::json j = nlohmann::json::parse(json, json + size, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(error, "not JSON");
  try {
    p.numKernels = j.at("kernels");
    p.kernelNames = j.at("kernel_names").get<std::vector<std::string>>();
    if ((int)p.kernelNames.size() != p.numKernels) return fail(error, "kernel names do not match the kernel count");
    if (!parseBody(j, weightsBytes, p, error)) return false;
    if (!j.contains("buckets")) return true;
    if (!p.decode) return fail(error, "token buckets of a training step");
    for (const auto& b : j.at("buckets")) {
      Program q;
      q.numKernels = p.numKernels, q.kernelNames = p.kernelNames;
      if (!parseBody(b, weightsBytes, q, error) || !checkBucket(p, p.buckets.empty() ? nullptr : &p.buckets.back(), q, error)) return false;
      p.buckets.push_back(std::move(q));
    }
  } catch (const nlohmann::json::exception& e) {
    return fail(error, e.what());
  }
  return true;
}

} // namespace sgc::rt
