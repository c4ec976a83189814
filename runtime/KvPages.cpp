// The page bookkeeping (see KvPages.h).
#include "runtime/KvPages.h"

#include <algorithm>

namespace sgc::rt {

KvPages::KvPages(int32_t blocks, int32_t blockSize, int32_t seqs, int32_t maxBlocks)
    : blocks_(blocks), blockSize_(blockSize), maxBlocks_(maxBlocks), tables_((size_t)seqs * maxBlocks, -1), refs_(blocks, 0),
      length_(seqs, -1), key_(blocks, 0), before_(blocks, -1), bucket_(blocks, -1), next_(blocks, -1),
      tokens_((size_t)blocks * blockSize, 0), older_(blocks, -1), newer_(blocks, -1) {
  freeList_.reserve(blocks);
  for (int32_t p = blocks - 1; p >= 0; --p) freeList_.push_back(p); // page 0 is taken first
}

int32_t KvPages::take() {
  if (freeList_.empty()) forget(oldest_); // the longest unused cached page, its bytes now free to be overwritten
  int32_t p = freeList_.back();
  freeList_.pop_back();
  refs_[p] = 1;
  return p;
}

void KvPages::drop(int32_t page) {
  if (--refs_[page] > 0) return;
  if (key_[page]) cache(page); // remembered: its bytes stay for a later prompt
  else freeList_.push_back(page);
}

void KvPages::cache(int32_t page) {
  older_[page] = newest_, newer_[page] = -1;
  (newest_ >= 0 ? newer_[newest_] : oldest_) = page;
  newest_ = page;
  ++cached_;
}

void KvPages::uncache(int32_t page) {
  (older_[page] >= 0 ? newer_[older_[page]] : oldest_) = newer_[page];
  (newer_[page] >= 0 ? older_[newer_[page]] : newest_) = older_[page];
  older_[page] = newer_[page] = -1;
  --cached_;
}

uint64_t KvPages::keyOf(uint64_t before, const int64_t* tokens, int32_t n) {
  uint64_t h = before ^ 0x9e3779b97f4a7c15ull; // FNV-1a over the tokens' bytes, seeded by the page before
  for (int32_t i = 0; i < n; ++i)
    for (int b = 0; b < 8; ++b) h = (h ^ ((uint64_t)tokens[i] >> (8 * b) & 0xff)) * 0x100000001b3ull;
  return h ? h : 1; // 0 means none
}

int32_t KvPages::find(uint64_t key, int32_t before, const int64_t* tokens) const {
  for (int32_t p = bucket_[key % blocks_]; p >= 0; p = next_[p])
    if (key_[p] == key && before_[p] == before && std::equal(tokens, tokens + blockSize_, tokens_.begin() + (size_t)p * blockSize_)) return p;
  return -1;
}

void KvPages::forget(int32_t page) {
  if (!key_[page]) return;
  for (int32_t* at = &bucket_[key_[page] % blocks_]; *at >= 0; at = &next_[*at])
    if (*at == page) {
      *at = next_[page];
      break;
    }
  key_[page] = 0, before_[page] = -1, next_[page] = -1;
  if (!refs_[page]) { // cached: now a plain free page
    uncache(page);
    freeList_.push_back(page);
  }
  // The pages remembered after it can no longer be found by their chain: none is held (a
  // sequence holding one holds this page too), so they are cached, and go the same way.
  for (int32_t p = 0; p < blocks_; ++p)
    if (key_[p] && before_[p] == page) forget(p);
}

int32_t KvPages::sharePrefix(int32_t seq, const int64_t* prompt, int32_t length) {
  int32_t* r = row(seq);
  uint64_t key = 0;
  int32_t i = 0;
  for (; (i + 1) * blockSize_ < length; ++i) { // full pages, and a token after them to compute
    const int64_t* t = prompt + (size_t)i * blockSize_;
    key = keyOf(key, t, blockSize_);
    int32_t p = find(key, i ? r[i - 1] : -1, t);
    if (p < 0) break;
    if (!refs_[p]) uncache(p);
    r[i] = p;
    ++refs_[p];
  }
  length_[seq] = i * blockSize_;
  return length_[seq];
}

void KvPages::remember(int32_t seq, const int64_t* prompt, int32_t length) {
  int32_t* r = row(seq);
  uint64_t key = 0;
  for (int32_t i = 0; (i + 1) * blockSize_ <= std::min(length, length_[seq]); ++i) {
    const int64_t* t = prompt + (size_t)i * blockSize_;
    key = keyOf(key, t, blockSize_);
    int32_t p = r[i];
    if (key_[p] || find(key, i ? r[i - 1] : -1, t) >= 0) continue; // remembered already (this page, or another like it)
    key_[p] = key, before_[p] = i ? r[i - 1] : -1;
    std::copy(t, t + blockSize_, tokens_.begin() + (size_t)p * blockSize_);
    next_[p] = bucket_[key % blocks_];
    bucket_[key % blocks_] = p;
  }
}

int32_t KvPages::addSequence() {
  for (int32_t s = 0; s < (int32_t)length_.size(); ++s)
    if (length_[s] < 0) {
      length_[s] = 0;
      return s;
    }
  return -1;
}

int32_t KvPages::pagesNeeded(int32_t seq, int32_t count) const {
  int32_t len = length_[seq], have = (len + blockSize_ - 1) / blockSize_, need = (len + count + blockSize_ - 1) / blockSize_;
  bool cow = count > 0 && len % blockSize_ != 0 && refs_[tables_[(size_t)seq * maxBlocks_ + have - 1]] > 1;
  return need - have + (cow ? 1 : 0);
}

void KvPages::append(int32_t seq, int32_t count, std::vector<std::pair<int32_t, int32_t>>& copies) {
  int32_t len = length_[seq], have = (len + blockSize_ - 1) / blockSize_, need = (len + count + blockSize_ - 1) / blockSize_;
  int32_t* r = row(seq);
  if (count > 0 && len % blockSize_ != 0 && refs_[r[have - 1]] > 1) { // the shared last page: this sequence's own copy
    int32_t copy = take();
    copies.emplace_back(r[have - 1], copy);
    drop(r[have - 1]);
    r[have - 1] = copy;
  }
  for (int32_t i = have; i < need; ++i) r[i] = take();
  length_[seq] = len + count;
}

int32_t KvPages::fork(int32_t seq) {
  int32_t child = addSequence();
  if (child < 0) return -1;
  int32_t n = (length_[seq] + blockSize_ - 1) / blockSize_;
  std::copy(row(seq), row(seq) + n, row(child));
  for (int32_t i = 0; i < n; ++i) ++refs_[row(child)[i]];
  length_[child] = length_[seq];
  return child;
}

void KvPages::release(int32_t seq) {
  int32_t* r = row(seq);
  for (int32_t i = 0; i < maxBlocks_; ++i)
    if (r[i] >= 0) {
      drop(r[i]);
      r[i] = -1;
    }
  length_[seq] = -1;
}

std::string KvPages::check() const {
  std::vector<int32_t> held(blocks_, 0), listed(blocks_, 0);
  for (int32_t s = 0; s < (int32_t)length_.size(); ++s) {
    int32_t n = length_[s] < 0 ? 0 : (length_[s] + blockSize_ - 1) / blockSize_;
    if (n > maxBlocks_) return "sequence " + std::to_string(s) + " is longer than the tables allow";
    for (int32_t i = 0; i < maxBlocks_; ++i) {
      int32_t p = tables_[(size_t)s * maxBlocks_ + i];
      if ((i < n) != (p >= 0)) return "sequence " + std::to_string(s) + " of length " + std::to_string(length_[s]) + " has entry " + std::to_string(i) + " = " + std::to_string(p);
      if (p >= blocks_) return "sequence " + std::to_string(s) + " names page " + std::to_string(p) + " outside the pool";
      if (p >= 0) ++held[p];
    }
  }
  for (int32_t p : freeList_) {
    if (p < 0 || p >= blocks_ || listed[p]++) return "page " + std::to_string(p) + " is on the free list twice or is no page";
  }
  int32_t count = 0;
  for (int32_t p = oldest_, last = -1; p >= 0; last = p, p = newer_[p]) {
    if (p >= blocks_ || older_[p] != last || listed[p]++ || ++count > blocks_) return "the cached pages' list is broken at page " + std::to_string(p);
    if (!key_[p] || (p == newest_) != (newer_[p] < 0)) return "cached page " + std::to_string(p) + " is not remembered, or ends the list early";
  }
  if (count != cached_) return "the cache counts " + std::to_string(cached_) + " pages, its list " + std::to_string(count);
  for (int32_t p = 0; p < blocks_; ++p) {
    if (refs_[p] != held[p]) return "page " + std::to_string(p) + " counts " + std::to_string(refs_[p]) + " references, the tables hold " + std::to_string(held[p]);
    if ((refs_[p] == 0) != (listed[p] == 1)) return "page " + std::to_string(p) + (refs_[p] ? " is held and free" : " is neither held nor free (leaked)");
    if (key_[p] && find(key_[p], before_[p], tokens_.data() + (size_t)p * blockSize_) < 0)
      return "page " + std::to_string(p) + " is remembered for a prefix but cannot be found";
    if (key_[p] && before_[p] >= 0 && !key_[before_[p]]) return "page " + std::to_string(p) + " is remembered after a page that is not";
  }
  return "";
}

} // namespace sgc::rt
