// sgc generate gen.so: greedy or sampled decoding over the C ABI of a library
// compiled with --mode decode, the tokens chosen where the step runs. Prompts
// are admitted while the cache has a slot and pages for them (continuous
// batching: a sequence joins as soon as it fits and leaves when it is done);
// when a step runs out of pages the newest sequence is preempted and later
// prefilled again from its tokens so far (its draws, counted by position, the
// same).
// Prompts admitted together are prefilled together (sgc_seqs_add).
// Prints one JSON line per prompt, in prompt order: its generated ids.
#include "driver/Args.h"
#include "driver/Common.h"
#include "driver/LibraryApi.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>

namespace sgc::driver {
namespace {

const CommandSpec kSpec{
    "generate", "sgc generate gen.so --prompt-ids 1,2,3 [--prompt-ids ...] --max-new-tokens N [--temperature T --top-k K --top-p P --seed S]",
    "Decoding with a library compiled by `sgc compile --mode decode`: each prompt's next tokens,\n"
    "decoded together, greedy or sampled where the step runs (prompt i draws with seed S * 1000003 + i:\n"
    "the same command gives the same tokens). Prints one JSON line per prompt: {\"prompt\": i, \"ids\": [...]}.",
    {{"prompt-ids", "IDS", "a prompt's token ids, comma-separated (repeat for more prompts)"},
     {"max-new-tokens", "N", "tokens to generate per prompt (fewer when a sequence reaches the max context)"},
     {"temperature", "T", "0 (default): greedy; else sample from softmax(logits / T)"},
     {"top-k", "K", "sample from the K most likely tokens only (default 0: all)"},
     {"top-p", "P", "then from the fewest most likely whose probability reaches P (default 1: all)"},
     {"seed", "S", "the draws' seed (default 0)"},
     {"device", "DEV", "cpu (default) or cuda:N"},
     {"threads", "N", "CPU threads (default: one per core)"},
     {"load", "FILE", "load the parameters from a safetensors checkpoint first"},
     {"stats", "", "print tokens per second and the cache's use to stderr"}}};

struct Request {
  size_t index;
  std::vector<int64_t> tokens; ///< the prompt, then the generated ids
  size_t prompt;
  sgc_sampling sampling;
  int32_t seq = -1;
  size_t generated() const { return tokens.size() - prompt; }
};

Expected<std::vector<int64_t>> parseIds(const std::string& s) {
  std::vector<int64_t> ids;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string part = s.substr(start, end - start);
    char* stop = nullptr;
    long long v = std::strtoll(part.c_str(), &stop, 10);
    if (part.empty() || *stop || v < 0) return makeError("--prompt-ids '" + s + "': expected non-negative integers separated by commas");
    ids.push_back(v);
    start = end + 1;
  }
  return ids;
}

} // namespace

int generateMain(int argc, char** argv) {
  int status = 0;
  auto args = parseCommand(kSpec, argc, argv, "one library", status);
  if (!args) return status;
  const std::string& path = args->positional()[0];
  std::vector<std::string> prompts = args->getAll("prompt-ids");
  if (prompts.empty() || !args->has("max-new-tokens")) return reportError("sgc generate needs --prompt-ids and --max-new-tokens");
  char* stop = nullptr;
  long long maxNew = std::strtoll(args->get("max-new-tokens").c_str(), &stop, 10);
  if (*stop || maxNew < 1 || maxNew > (1 << 30)) return reportError("--max-new-tokens expects a positive integer");
  double temperature = std::strtod(args->get("temperature", "0").c_str(), &stop), topP = 1;
  if (*stop) return reportError("--temperature expects a number");
  topP = std::strtod(args->get("top-p", "1").c_str(), &stop);
  if (*stop) return reportError("--top-p expects a number");
  long long topK = std::strtoll(args->get("top-k", "0").c_str(), &stop, 10);
  if (*stop || topK < 0 || topK > INT32_MAX) return reportError("--top-k expects a non-negative integer");
  unsigned long long seed = std::strtoull(args->get("seed", "0").c_str(), &stop, 10);
  if (*stop) return reportError("--seed expects a non-negative integer");
  std::deque<Request> pending;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto ids = parseIds(prompts[i]);
    if (!ids) return reportError(ids.takeError());
    pending.push_back({i, *ids, ids->size(), {(float)temperature, (int32_t)topK, (float)topP, seed * 1000003ull + i}});
  }
  Api api;
  if (Error e = loadApi(path, api)) return reportError(std::move(e));
  if (!api.complete()) return reportError(path + ": built by an sgc without decoding; compile it again with --mode decode");
  sgc_session_options o = SGC_SESSION_OPTIONS_INIT;
  std::string device = args->get("device", "cpu");
  o.device = device.c_str();
  o.num_threads = std::atoi(args->get("threads", "0").c_str());
  sgc_session* s = nullptr;
  if (api.sgc_session_create(&o, &s)) return reportError(path + ": " + api.sgc_last_error());
  std::unique_ptr<sgc_session, decltype(api.sgc_session_destroy)> session(s, api.sgc_session_destroy);
  auto failed = [&](const std::string& what) { return reportError(path + ": " + what + ": " + api.sgc_last_error()); };
  if (args->has("load") && api.sgc_load(s, args->get("load").c_str())) return failed("loading " + args->get("load"));
  sgc_decode_info info;
  if (api.sgc_decode_info_get(s, &info)) return failed("not a decoding library");
  std::vector<int64_t> next(info.max_seqs); // the tokens, chosen where the step runs: no logits come back
  std::vector<Request> active, done;
  std::vector<sgc_sampling> sampling;
  std::vector<int32_t> seqs, lengths;
  std::vector<int64_t> tokens;
  int64_t decoded = 0;
  auto t0 = std::chrono::steady_clock::now();
  // A sequence is done after its new tokens, or when the next one would pass the max context.
  auto finished = [&](const Request& r) { return r.generated() >= (size_t)maxNew || r.tokens.size() >= (size_t)info.max_context; };
  auto retire = [&](Request r) {
    if (r.seq >= 0) api.sgc_seq_free(s, r.seq);
    r.seq = -1;
    done.push_back(std::move(r));
  };
  while (!pending.empty() || !active.empty()) {
    // Admit what fits, prefilled together: as many as there are free slots, halved while the
    // pages run short.
    for (size_t k = std::min(pending.size(), (size_t)info.max_seqs - active.size()); k > 0;) {
      tokens.clear(), lengths.clear(), sampling.clear();
      for (size_t i = 0; i < k; ++i) {
        const Request& r = pending[i];
        tokens.insert(tokens.end(), r.tokens.begin(), r.tokens.end()), lengths.push_back((int32_t)r.tokens.size()), sampling.push_back(r.sampling);
      }
      seqs.resize(k);
      sgc_status st = api.sgc_seqs_add(s, (int32_t)k, tokens.data(), lengths.data(), sampling.data(), seqs.data(), next.data(), nullptr);
      if (st == SGC_ERROR_OUT_OF_PAGES && k > 1) {
        k /= 2;
        continue;
      }
      if (st == SGC_ERROR_OUT_OF_PAGES && !active.empty()) break;
      if (st) return failed("prompt " + std::to_string(pending.front().index));
      for (size_t i = 0; i < k; ++i) {
        Request r = std::move(pending.front());
        pending.pop_front();
        r.seq = seqs[i];
        r.tokens.push_back(next[i]);
        ++decoded;
        if (finished(r)) retire(std::move(r));
        else active.push_back(std::move(r));
      }
      k = std::min(pending.size(), (size_t)info.max_seqs - active.size());
    }
    if (active.empty()) continue;
    seqs.clear(), tokens.clear(), sampling.clear();
    for (const Request& r : active) seqs.push_back(r.seq), tokens.push_back(r.tokens.back()), sampling.push_back(r.sampling);
    sgc_status st = api.sgc_decode_step_sample(s, (int32_t)seqs.size(), seqs.data(), tokens.data(), sampling.data(), next.data(), nullptr);
    if (st == SGC_ERROR_OUT_OF_PAGES && active.size() > 1) { // preempt the newest: it is prefilled again later
      Request r = std::move(active.back());
      active.pop_back();
      api.sgc_seq_free(s, r.seq);
      r.seq = -1;
      pending.push_front(std::move(r));
      continue;
    }
    if (st) return failed("decoding");
    for (size_t i = 0; i < active.size(); ++i) active[i].tokens.push_back(next[i]);
    decoded += (int64_t)active.size();
    std::vector<Request> still;
    for (Request& r : active) {
      if (finished(r)) retire(std::move(r));
      else still.push_back(std::move(r));
    }
    active = std::move(still);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::sort(done.begin(), done.end(), [](const Request& a, const Request& b) { return a.index < b.index; });
  for (const Request& r : done) {
    printf("{\"prompt\": %zu, \"ids\": [", r.index);
    for (size_t i = r.prompt; i < r.tokens.size(); ++i) printf(i > r.prompt ? ", %lld" : "%lld", (long long)r.tokens[i]);
    printf("]}\n");
  }
  if (args->has("stats"))
    fprintf(stderr, "generated %lld tokens in %.3f s (%.1f tokens/s); cache: %d pages of %d tokens, %d sequence slots\n", (long long)decoded, secs,
            decoded / std::max(secs, 1e-9), info.blocks, info.block_size, info.max_seqs);
  if (api.sgc_kv_check(s)) return failed("the cache's bookkeeping");
  return 0;
}

} // namespace sgc::driver
