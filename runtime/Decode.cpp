// The decoding half of the C ABI (include/sgc/sgc.h): sequences over the
// paged key/value cache of a library compiled with --mode decode. The pages
// are kept by KvPages on the host; a step stages each token's id, position,
// sequence slot and the block tables into the program's inputs, runs the
// compiled step, and reads back the logits. A call that fails a check
// changes nothing; only a device failure in the middle of a step can leave
// a sequence half-written, and then prefill frees it.
#include "runtime/Session.h"

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace sgc::rt;

DecodeState::DecodeState(const Decode& d, uint64_t logitsBytes)
    : pages((int32_t)d.blocks, (int32_t)d.blockSize, (int32_t)d.seqs, (int32_t)d.maxBlocks), ids(d.tokens), positions(d.tokens), seq(d.tokens),
      pos(d.tokens), narrow(d.tokens), logits(logitsBytes), next(d.tokens), temperature(d.tokens), topP(d.tokens), topK(d.tokens), seed(d.tokens) {
  copies.reserve(d.seqs);
  shared.reserve(d.seqs);
}

namespace {

/// The decode state, or an error for a library that trains.
sgc_status decoding(const sgc_session* s, const char* what) {
  if (!s) return fail(SGC_ERROR_INVALID_ARGUMENT, std::string(what) + ": the session is NULL");
  if (!s->decode) return fail(SGC_ERROR_INVALID_ARGUMENT, std::string(what) + ": this library trains; decoding needs one compiled with --mode decode");
  return SGC_OK;
}

sgc_status unknownSeq(int32_t seq) { return fail(SGC_ERROR_NOT_FOUND, "sequence " + std::to_string(seq) + " is not live"); }

/// A bf16 or f16 number as a float.
float narrowToFloat(uint16_t h, bool bf16) {
  float f;
  if (bf16) {
    uint32_t bits = (uint32_t)h << 16;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 31, man = h & 1023;
  if (exp == 0) f = std::ldexp((float)man, -24);
  else if (exp == 31) f = man ? NAN : INFINITY;
  else f = std::ldexp((float)(man | 1024), (int)exp - 25);
  return sign ? -f : f;
}

/// A step's inputs as they are staged: on a GPU into a host copy of the step's inputs region,
/// sent in one copy (a step's inputs are all the region holds: ids, positions, block tables,
/// sequences, positions in them and sampling); on the CPU straight into the arena.
struct Inputs {
  sgc_session* s;
  const StepArena& at;
  std::vector<uint8_t>& mirror;
  bool put(int id, const void* src, std::string& error) {
    const TensorDesc& t = at.prog->tensors[id];
    if (!s->gpu || t.region != 0) return s->write(at, id, src, error);
    std::memcpy(mirror.data() + t.offset, src, t.bytes);
    return true;
  }
  bool send(std::string& error) { return !s->gpu || s->gpu->toDevice(at.devBase[0], mirror.data(), mirror.size(), error); }
};

/// Stages an integer array as an I64 or I32 input.
bool putInts(Inputs& in, int id, const int64_t* v, size_t n, std::string& error) {
  if (in.at.prog->tensors[id].dtype == "I64") return in.put(id, v, error);
  std::vector<int32_t>& narrow = in.s->decode->narrow;
  narrow.assign(v, v + n);
  return in.put(id, narrow.data(), error);
}

/// The step program that runs n tokens: the smallest token bucket that holds them, else the step.
const StepArena& stepFor(const sgc_session* s, size_t n) {
  const std::vector<StepArena>& steps = s->decode->steps;
  for (size_t b = 1; b < steps.size(); ++b)
    if ((size_t)steps[b].prog->decode->tokens >= n) return steps[b];
  return steps[0];
}

/// Copies the pages of pending copies on write, in every layer's pool.
bool copyPages(sgc_session* s, std::string& error) {
  const Decode& d = *s->prog.decode;
  for (auto [from, to] : s->decode->copies)
    for (int pool : d.pools) {
      uint64_t page = s->prog.tensors[pool].bytes / d.blocks;
      if (s->gpu) {
        if (!s->gpu->copy(s->devData(pool) + to * page, s->devData(pool) + from * page, page, error)) return false;
      } else {
        std::memcpy(s->data(pool) + to * page, s->data(pool) + from * page, page);
      }
    }
  s->decode->copies.clear();
  return true;
}

/// What the host takes from a step: the logits, and each row's greedy next token.
struct Wanted {
  bool logits = true, next = false;
};

/// The greedy next tokens, or logits, or both: a library compiled before the tokens has only logits.
sgc_status checkWanted(const sgc_session* s, const int64_t* next, const float* logits, const char* what) {
  if (!next && !logits) return fail(SGC_ERROR_INVALID_ARGUMENT, std::string(what) + ": next and logits are both NULL");
  if (next && s->prog.decode->next < 0)
    return fail(SGC_ERROR_INVALID_ARGUMENT, std::string(what) + ": this library was compiled by an sgc without greedy tokens: compile it again");
  return SGC_OK;
}

/// The sampling parameters: checked, of a library that has them (`what` names the call and entry).
sgc_status checkSampling(const sgc_session* s, const sgc_sampling* p, int32_t count, const char* what) {
  if (!p) return SGC_OK;
  if (s->prog.decode->temperature < 0)
    return fail(SGC_ERROR_INVALID_ARGUMENT, std::string(what) + ": this library was compiled by an sgc without sampling: compile it again");
  for (int32_t i = 0; i < count; ++i) {
    const sgc_sampling& q = p[i];
    std::string at = std::string(what) + ": sampling[" + std::to_string(i) + "]";
    if (!std::isfinite(q.temperature) || q.temperature < 0)
      return fail(SGC_ERROR_INVALID_ARGUMENT, at + ".temperature is " + std::to_string(q.temperature) + ": expected 0 (greedy) or more, finite");
    if (q.top_k < 0) return fail(SGC_ERROR_INVALID_ARGUMENT, at + ".top_k is " + std::to_string(q.top_k) + ": expected 0 (all) or more");
    if (!(q.top_p > 0 && q.top_p <= 1)) return fail(SGC_ERROR_INVALID_ARGUMENT, at + ".top_p is " + std::to_string(q.top_p) + ": expected (0, 1]");
  }
  return SGC_OK;
}

/// Stages row `row`'s sampling (NULL: greedy).
void stageSampling(DecodeState& st, size_t row, const sgc_sampling* p) {
  sgc_sampling q = p ? *p : sgc_sampling{0, 0, 1, 0};
  st.temperature[row] = q.temperature, st.topK[row] = q.top_k, st.topP[row] = q.top_p, st.seed[row] = q.seed;
}

/// Runs the first n staged tokens (the rest unused), in the smallest step program that holds
/// them, and reads what is wanted of them.
bool runTokens(sgc_session* s, size_t n, Wanted wanted, std::string& error) {
  DecodeState& st = *s->decode;
  const StepArena& at = stepFor(s, n);
  const Decode& d = *at.prog->decode;
  for (size_t i = n; i < (size_t)d.tokens; ++i) st.ids[i] = 0, st.positions[i] = 0, st.seq[i] = -1, st.pos[i] = 0, stageSampling(st, i, nullptr);
  Inputs in{s, at, st.mirror[&at - st.steps.data()]};
  if (!putInts(in, d.ids, st.ids.data(), d.tokens, error)) return false;
  if (d.positions >= 0 && !putInts(in, d.positions, st.positions.data(), d.tokens, error)) return false;
  if (!in.put(d.seq, st.seq.data(), error) || !in.put(d.pos, st.pos.data(), error) || !in.put(d.tables, st.pages.tables().data(), error))
    return false;
  if (d.temperature >= 0 && (!in.put(d.temperature, st.temperature.data(), error) || !in.put(d.topK, st.topK.data(), error) ||
                             !in.put(d.topP, st.topP.data(), error) || !in.put(d.seed, st.seed.data(), error)))
    return false;
  if (!in.send(error) || !runStepOf(s, at, error)) return false;
  if (wanted.logits && !s->read(at, d.logits, st.logits.data(), error)) return false;
  return !wanted.next || s->read(at, d.next, st.next.data(), error);
}

/// Row `row` of the staged logits as floats.
void logitsRow(const sgc_session* s, size_t row, float* out) {
  const Decode& d = *s->prog.decode;
  const std::string& dtype = s->prog.tensors[d.logits].dtype;
  size_t width = dtype == "F32" ? 4 : 2;
  const uint8_t* p = s->decode->logits.data() + row * d.vocab * width;
  if (dtype == "F32") {
    std::memcpy(out, p, d.vocab * sizeof(float));
    return;
  }
  bool bf16 = dtype == "BF16"; // else F16 (Program.cpp admits no other)
  for (int64_t v = 0; v < d.vocab; ++v) {
    uint16_t h;
    std::memcpy(&h, p + v * width, 2);
    out[v] = narrowToFloat(h, bf16);
  }
}

sgc_status checkToken(const sgc_session* s, int64_t token) {
  int64_t vocab = s->prog.decode->vocab;
  if (token < 0 || token >= vocab) return fail(SGC_ERROR_INVALID_ARGUMENT, "token id " + std::to_string(token) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  return SGC_OK;
}

/// The pages appending one token to each of `seqs` takes: a new page per sequence whose last
/// page is full, and a copy per sequence whose partly filled last page is shared, except that
/// when every holder of a shared page appends, the last of them keeps the page.
int32_t pagesForStep(sgc_session* s, const int32_t* seqs, int32_t count) {
  const KvPages& pages = s->decode->pages;
  int64_t maxBlocks = s->prog.decode->maxBlocks;
  int32_t need = 0;
  std::vector<int32_t>& shared = s->decode->shared; // the shared last pages, one entry per appending holder
  shared.clear();
  for (int32_t i = 0; i < count; ++i) {
    int32_t len = pages.length(seqs[i]);
    if (len % pages.blockSize() == 0) {
      ++need;
      continue;
    }
    int32_t last = pages.tables()[seqs[i] * maxBlocks + (len - 1) / pages.blockSize()];
    if (pages.refs(last) > 1) shared.push_back(last);
  }
  std::sort(shared.begin(), shared.end());
  for (size_t i = 0; i < shared.size();) {
    size_t j = i;
    while (j < shared.size() && shared[j] == shared[i]) ++j;
    need += (int32_t)(j - i) - (pages.refs(shared[i]) == (int32_t)(j - i) ? 1 : 0);
    i = j;
  }
  return need;
}

/// f(), with any exception turned into a status (none crosses the ABI).
template <typename F>
sgc_status guarded(F f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(SGC_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(SGC_ERROR_INTERNAL, e.what());
  }
}

} // namespace

extern "C" {

sgc_status sgc_decode_info_get(const sgc_session* s, sgc_decode_info* info) {
  return guarded([&]() -> sgc_status {
    if (sgc_status st = decoding(s, "sgc_decode_info_get")) return st;
    if (!info) return fail(SGC_ERROR_INVALID_ARGUMENT, "info must not be NULL");
    const Decode& d = *s->prog.decode;
    sgc_decode_info r{};
    r.block_size = (int32_t)d.blockSize, r.blocks = (int32_t)d.blocks, r.max_seqs = (int32_t)d.seqs, r.max_context = (int32_t)d.maxContext;
    r.tokens_per_step = (int32_t)d.tokens, r.vocab = (int32_t)d.vocab, r.layers = (int32_t)d.pools.size();
    r.free_pages = s->decode->pages.freePages();
    for (int32_t q = 0; q < (int32_t)d.seqs; ++q) r.live_seqs += s->decode->pages.live(q);
    for (int pool : d.pools) r.pool_bytes += s->prog.tensors[pool].bytes;
    r.table_bytes = s->prog.tensors[d.tables].bytes;
    r.free_list_bytes = (uint64_t)d.blocks * 8 + (uint64_t)d.seqs * 4; // free list and counts per page, lengths per slot
    *info = r;
    return SGC_OK;
  });
}

} // extern "C"

namespace {

/// sgc_seqs_add and the single-prompt calls: `count` prompts (concatenated in `tokens`, lengths[i]
/// each) take slots and pages, their tokens run together (in request order, packed into as few
/// steps as they fill), and each prompt's last token's next token (chosen by sampling[i]; NULL:
/// greedy) goes to next[i], its logits to logits + i * vocab (either may be NULL). Prefixes are
/// shared with the sequences live before the call. All or nothing.
sgc_status addSequences(sgc_session* s, int32_t count, const int64_t* tokens, const int32_t* lengths, const sgc_sampling* sampling, int32_t* seqs,
                        int64_t* next, float* logits) {
  return guarded([&]() -> sgc_status {
    const Decode& d = *s->prog.decode;
    if (count < 1 || count > d.seqs || !tokens || !lengths || !seqs)
      return fail(SGC_ERROR_INVALID_ARGUMENT, "expected 1 to max_seqs = " + std::to_string(d.seqs) + " prompts, and non-NULL prompts, lengths and seqs");
    std::vector<const int64_t*> prompt(count);
    int64_t at = 0;
    for (int32_t i = 0; i < count; at += lengths[i++]) {
      if (lengths[i] < 1 || lengths[i] > d.maxContext)
        return fail(SGC_ERROR_INVALID_ARGUMENT, "a prompt of " + std::to_string(lengths[i]) + " tokens: expected 1 to max_context = " + std::to_string(d.maxContext));
      prompt[i] = tokens + at;
      for (int32_t t = 0; t < lengths[i]; ++t)
        if (sgc_status st = checkToken(s, prompt[i][t])) return st;
    }
    if (!s->paramsLoaded) return fail(SGC_ERROR_INVALID_ARGUMENT, "the parameters are not loaded: this library was compiled with --weights none; call sgc_load first");
    DecodeState& st = *s->decode;
    std::vector<int32_t> slot, shared;
    auto releaseAll = [&] {
      for (int32_t q : slot) st.pages.release(q);
    };
    for (int32_t i = 0; i < count; ++i) { // slots and pages for all, or for none
      int32_t q = st.pages.addSequence();
      if (q < 0) {
        releaseAll();
        return fail(SGC_ERROR_OUT_OF_PAGES, "all " + std::to_string(d.seqs) + " sequence slots are live");
      }
      slot.push_back(q);
      shared.push_back(st.pages.sharePrefix(q, prompt[i], lengths[i])); // pages of a live sequence's identical prefix
      int32_t need = st.pages.pagesNeeded(q, lengths[i] - shared[i]);
      if (need > st.pages.freePages()) {
        int32_t free = st.pages.freePages();
        releaseAll();
        return fail(SGC_ERROR_OUT_OF_PAGES, "a prompt of " + std::to_string(lengths[i]) + " tokens needs " + std::to_string(need) + " pages; " +
                                                std::to_string(free) + " are free" + (count > 1 ? " after the prompts before it" : ""));
      }
      st.pages.append(q, lengths[i] - shared[i], st.copies);
    }
    std::string error;
    std::vector<std::pair<int32_t, size_t>> ends; // the prompts whose last token this step runs, and its row
    size_t n = 0;
    auto run = [&] {
      bool wantsLogits = logits && !ends.empty(), wantsNext = next && !ends.empty();
      if (!runTokens(s, n, {wantsLogits, wantsNext}, error)) return false;
      for (auto [i, row] : ends) {
        if (logits) logitsRow(s, row, logits + (size_t)i * d.vocab);
        if (next) next[i] = st.next[row];
      }
      ends.clear(), n = 0;
      return true;
    };
    bool ok = true;
    for (int32_t i = 0; i < count && ok; ++i)
      for (int32_t t = shared[i]; t < lengths[i] && ok; ++t) { // the rest of each prompt, packed into steps of `tokens` rows
        st.ids[n] = prompt[i][t], st.positions[n] = t, st.seq[n] = slot[i], st.pos[n] = t;
        stageSampling(st, n, sampling ? sampling + i : nullptr);
        if (t == lengths[i] - 1) ends.push_back({i, n});
        if (++n == (size_t)d.tokens) ok = run();
      }
    if (ok && n) ok = run(); // the last, partly filled step
    if (!ok) {
      releaseAll();
      return fail(SGC_ERROR_DEVICE, error);
    }
    for (int32_t i = 0; i < count; ++i) {
      st.pages.remember(slot[i], prompt[i], lengths[i]);
      seqs[i] = slot[i];
    }
    return SGC_OK;
  });
}

/// sgc_decode_step, sgc_decode_step_greedy and sgc_decode_step_sample: each sequence's next token
/// (chosen by sampling[i]; NULL: greedy) to `next`, its logits to `logits` (either may be NULL).
sgc_status decodeStep(sgc_session* s, int32_t count, const int32_t* seqs, const int64_t* tokens, const sgc_sampling* sampling, int64_t* next,
                      float* logits) {
  return guarded([&]() -> sgc_status {
    const Decode& d = *s->prog.decode;
    DecodeState& st = *s->decode;
    if (count < 1 || count > d.seqs || !seqs || !tokens)
      return fail(SGC_ERROR_INVALID_ARGUMENT, "expected 1 to max_seqs = " + std::to_string(d.seqs) + " sequences, and non-NULL seqs and tokens");
    for (int32_t i = 0; i < count; ++i) {
      if (!st.pages.live(seqs[i])) return unknownSeq(seqs[i]);
      if (std::count(seqs, seqs + i, seqs[i])) return fail(SGC_ERROR_INVALID_ARGUMENT, "sequence " + std::to_string(seqs[i]) + " appears twice in one step");
      if (st.pages.length(seqs[i]) >= d.maxContext)
        return fail(SGC_ERROR_INVALID_ARGUMENT, "sequence " + std::to_string(seqs[i]) + " is at max_context = " + std::to_string(d.maxContext));
      if (sgc_status e = checkToken(s, tokens[i])) return e;
    }
    int32_t need = pagesForStep(s, seqs, count);
    if (need > st.pages.freePages())
      return fail(SGC_ERROR_OUT_OF_PAGES, "this step needs " + std::to_string(need) + " new pages; " + std::to_string(st.pages.freePages()) + " are free");
    for (int32_t i = 0; i < count; ++i) st.pages.append(seqs[i], 1, st.copies);
    std::string error;
    if (!copyPages(s, error)) return fail(SGC_ERROR_DEVICE, error);
    for (int32_t start = 0; start < count; start += (int32_t)d.tokens) {
      size_t n = std::min<size_t>(d.tokens, count - start);
      for (size_t i = 0; i < n; ++i) {
        int32_t q = seqs[start + i], p = st.pages.length(q) - 1;
        st.ids[i] = tokens[start + i], st.positions[i] = p, st.seq[i] = q, st.pos[i] = p;
        stageSampling(st, i, sampling ? sampling + start + i : nullptr);
      }
      if (!runTokens(s, n, {logits != nullptr, next != nullptr}, error)) return fail(SGC_ERROR_DEVICE, error);
      for (size_t i = 0; i < n; ++i) {
        if (logits) logitsRow(s, i, logits + (start + i) * d.vocab);
        if (next) next[start + i] = st.next[i];
      }
    }
    return SGC_OK;
  });
}

} // namespace

extern "C" {

sgc_status sgc_seq_add(sgc_session* s, const int64_t* prompt, int32_t length, int32_t* seq, float* logits) {
  if (sgc_status st = decoding(s, "sgc_seq_add")) return st;
  return addSequences(s, 1, prompt, &length, nullptr, seq, nullptr, logits);
}

sgc_status sgc_seq_add_greedy(sgc_session* s, const int64_t* prompt, int32_t length, int32_t* seq, int64_t* next, float* logits) {
  if (sgc_status st = decoding(s, "sgc_seq_add_greedy")) return st;
  if (sgc_status st = checkWanted(s, next, logits, "sgc_seq_add_greedy")) return st;
  return addSequences(s, 1, prompt, &length, nullptr, seq, next, logits);
}

sgc_status sgc_seq_add_sample(sgc_session* s, const int64_t* prompt, int32_t length, const sgc_sampling* sampling, int32_t* seq, int64_t* next,
                              float* logits) {
  if (sgc_status st = decoding(s, "sgc_seq_add_sample")) return st;
  if (sgc_status st = checkWanted(s, next, logits, "sgc_seq_add_sample")) return st;
  if (sgc_status st = checkSampling(s, sampling, 1, "sgc_seq_add_sample")) return st;
  return addSequences(s, 1, prompt, &length, sampling, seq, next, logits);
}

sgc_status sgc_seqs_add(sgc_session* s, int32_t count, const int64_t* tokens, const int32_t* lengths, const sgc_sampling* sampling, int32_t* seqs,
                        int64_t* next, float* logits) {
  if (sgc_status st = decoding(s, "sgc_seqs_add")) return st;
  if (next && s->prog.decode->next < 0)
    return fail(SGC_ERROR_INVALID_ARGUMENT, "sgc_seqs_add: this library was compiled by an sgc without greedy tokens: compile it again");
  if (count >= 1 && count <= s->prog.decode->seqs) // else addSequences refuses the count, reading nothing
    if (sgc_status st = checkSampling(s, sampling, count, "sgc_seqs_add")) return st;
  return addSequences(s, count, tokens, lengths, sampling, seqs, next, logits);
}

sgc_status sgc_decode_step(sgc_session* s, int32_t count, const int32_t* seqs, const int64_t* tokens, float* logits) {
  if (sgc_status st = decoding(s, "sgc_decode_step")) return st;
  if (!logits) return fail(SGC_ERROR_INVALID_ARGUMENT, "sgc_decode_step: logits must not be NULL (sgc_decode_step_greedy hands back tokens)");
  return decodeStep(s, count, seqs, tokens, nullptr, nullptr, logits);
}

sgc_status sgc_decode_step_greedy(sgc_session* s, int32_t count, const int32_t* seqs, const int64_t* tokens, int64_t* next, float* logits) {
  if (sgc_status st = decoding(s, "sgc_decode_step_greedy")) return st;
  if (sgc_status st = checkWanted(s, next, logits, "sgc_decode_step_greedy")) return st;
  return decodeStep(s, count, seqs, tokens, nullptr, next, logits);
}

sgc_status sgc_decode_step_sample(sgc_session* s, int32_t count, const int32_t* seqs, const int64_t* tokens, const sgc_sampling* sampling,
                                  int64_t* next, float* logits) {
  if (sgc_status st = decoding(s, "sgc_decode_step_sample")) return st;
  if (sgc_status st = checkWanted(s, next, logits, "sgc_decode_step_sample")) return st;
  if (count >= 1 && count <= s->prog.decode->seqs) // else decodeStep refuses the count, reading nothing
    if (sgc_status st = checkSampling(s, sampling, count, "sgc_decode_step_sample")) return st;
  return decodeStep(s, count, seqs, tokens, sampling, next, logits);
}

sgc_status sgc_seq_fork(sgc_session* s, int32_t seq, int32_t* child) {
  return guarded([&]() -> sgc_status {
    if (sgc_status st = decoding(s, "sgc_seq_fork")) return st;
    if (!child) return fail(SGC_ERROR_INVALID_ARGUMENT, "child must not be NULL");
    if (!s->decode->pages.live(seq)) return unknownSeq(seq);
    int32_t c = s->decode->pages.fork(seq);
    if (c < 0) return fail(SGC_ERROR_OUT_OF_PAGES, "all " + std::to_string(s->prog.decode->seqs) + " sequence slots are live");
    *child = c;
    return SGC_OK;
  });
}

sgc_status sgc_seq_free(sgc_session* s, int32_t seq) {
  return guarded([&]() -> sgc_status {
    if (sgc_status st = decoding(s, "sgc_seq_free")) return st;
    if (!s->decode->pages.live(seq)) return unknownSeq(seq);
    s->decode->pages.release(seq);
    return SGC_OK;
  });
}

sgc_status sgc_seq_length(const sgc_session* s, int32_t seq, int32_t* length) {
  return guarded([&]() -> sgc_status {
    if (sgc_status st = decoding(s, "sgc_seq_length")) return st;
    if (!length) return fail(SGC_ERROR_INVALID_ARGUMENT, "length must not be NULL");
    if (!s->decode->pages.live(seq)) return unknownSeq(seq);
    *length = s->decode->pages.length(seq);
    return SGC_OK;
  });
}

sgc_status sgc_kv_check(const sgc_session* s) {
  return guarded([&]() -> sgc_status {
    if (sgc_status st = decoding(s, "sgc_kv_check")) return st;
    std::string why = s->decode->pages.check();
    return why.empty() ? SGC_OK : fail(SGC_ERROR_INTERNAL, "the key/value cache's bookkeeping: " + why);
  });
}

} // extern "C"
