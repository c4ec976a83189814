// The page bookkeeping (see KvPages.h).
#include "runtime/KvPages.h"

#include <algorithm>

namespace sgc::rt {

KvPages::KvPages(int32_t blocks, int32_t blockSize, int32_t seqs, int32_t maxBlocks)
    : blocks_(blocks), blockSize_(blockSize), maxBlocks_(maxBlocks), tables_((size_t)seqs * maxBlocks, -1), refs_(blocks, 0),
      length_(seqs, -1) {
  freeList_.reserve(blocks);
  for (int32_t p = blocks - 1; p >= 0; --p) freeList_.push_back(p); // page 0 is taken first
}

int32_t KvPages::take() {
  int32_t p = freeList_.back();
  freeList_.pop_back();
  refs_[p] = 1;
  return p;
}

void KvPages::drop(int32_t page) {
  if (--refs_[page] == 0) freeList_.push_back(page);
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
  for (int32_t p = 0; p < blocks_; ++p) {
    if (refs_[p] != held[p]) return "page " + std::to_string(p) + " counts " + std::to_string(refs_[p]) + " references, the tables hold " + std::to_string(held[p]);
    if ((refs_[p] == 0) != (listed[p] == 1)) return "page " + std::to_string(p) + (refs_[p] ? " is held and free" : " is neither held nor free (leaked)");
  }
  return "";
}

} // namespace sgc::rt
