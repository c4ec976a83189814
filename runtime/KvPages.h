// The bookkeeping of a paged key/value cache, on the host: which pages of the
// pool each sequence holds (its row of the block tables), how many sequences
// share each page (reference counts: a fork shares its parent's pages), and
// the free list. Everything is sized when it is made (the compiled plan's
// blocks, block size, sequences and pages per sequence); no call allocates.
//
// A sequence slot is live from addSequence or fork until release. Its pages
// are tables()[slot * maxBlocks + i] for i < ceil(length / blockSize), the
// rest -1. A page a sequence will write is never shared: appending to a
// sequence whose partly filled last page is shared first gives it a copy of
// that page (copy on write); the caller copies the bytes.
//
// Prefix caching: a full page of a prompt is remembered by its tokens and the
// page before it (a chained hash, checked token by token); a later prompt that
// starts with the same pages shares them (their reference counts, as a fork's)
// and computes only the tokens after them. A remembered page that no sequence
// holds any more keeps its bytes (a free page that is cached): free pages are
// taken plain first, then cached ones, the longest unused first, each
// forgotten (with the cached pages remembered after it) as it is taken.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sgc::rt {

class KvPages {
public:
  KvPages(int32_t blocks, int32_t blockSize, int32_t seqs, int32_t maxBlocks);

  int32_t blockSize() const { return blockSize_; }
  int32_t maxLength() const { return maxBlocks_ * blockSize_; }
  /// Pages a sequence may take: plain free ones and cached ones.
  int32_t freePages() const { return (int32_t)freeList_.size() + cached_; }
  /// Of those, the cached ones (remembered, held by no sequence).
  int32_t cachedPages() const { return cached_; }
  bool live(int32_t seq) const { return seq >= 0 && seq < (int32_t)length_.size() && length_[seq] >= 0; }
  int32_t length(int32_t seq) const { return length_[seq]; }
  int32_t refs(int32_t page) const { return refs_[page]; }
  /// The block tables, [seqs, maxBlocks] row-major; -1 where a sequence holds no page.
  const std::vector<int32_t>& tables() const { return tables_; }

  /// A free slot made live with no tokens; -1 when every slot is taken.
  int32_t addSequence();
  /// The pages appending `count` tokens to live `seq` takes from the free list.
  int32_t pagesNeeded(int32_t seq, int32_t count) const;
  /// Appends `count` tokens to live `seq` (its length must stay within maxLength(), and
  /// pagesNeeded(seq, count) pages must be free): takes pages for them, and adds to `copies`
  /// the (from, to) page of a copy on write.
  void append(int32_t seq, int32_t count, std::vector<std::pair<int32_t, int32_t>>& copies);
  /// A new live slot sharing every page of live `seq`; -1 when every slot is taken.
  int32_t fork(int32_t seq);
  /// Gives live, empty `seq` the remembered pages that hold the first full pages of `prompt`
  /// (`length` tokens), leaving at least its last token to compute; returns the tokens shared.
  int32_t sharePrefix(int32_t seq, const int64_t* prompt, int32_t length);
  /// Remembers the full pages of live `seq` that hold `prompt`'s tokens (its first `length`).
  void remember(int32_t seq, const int64_t* prompt, int32_t length);
  /// Gives back live `seq`'s pages (each freed when no other sequence holds it) and its slot.
  void release(int32_t seq);

  /// "" when the invariants hold: each page is plain free (reference count 0, on the free list
  /// once, not remembered), cached (count 0, remembered, in the cache's order once) or held (its
  /// count is the number of table entries naming it); a sequence holds exactly the pages its
  /// length needs; free slots hold none. Else what is wrong.
  std::string check() const;

private:
  int32_t blocks_, blockSize_, maxBlocks_;
  std::vector<int32_t> tables_, refs_, freeList_, length_; ///< length -1: a free slot
  // The remembered pages: each page's key (0: none), the page before it, its tokens, and a chain
  // of pages per bucket of keys (bucket_[key % blocks] starts it, next_ follows it).
  std::vector<uint64_t> key_;
  std::vector<int32_t> before_, bucket_, next_;
  std::vector<int64_t> tokens_;
  // The cached pages, oldest first: a list through older_ and newer_ (-1 at its ends).
  std::vector<int32_t> older_, newer_;
  int32_t oldest_ = -1, newest_ = -1, cached_ = 0;
  int32_t take();
  void cache(int32_t page);
  void uncache(int32_t page);
  void drop(int32_t page);
  static uint64_t keyOf(uint64_t before, const int64_t* tokens, int32_t n);
  /// The remembered page with this key, page before it and tokens; -1 if none.
  int32_t find(uint64_t key, int32_t before, const int64_t* tokens) const;
  void forget(int32_t page);
  int32_t* row(int32_t seq) { return tables_.data() + (size_t)seq * maxBlocks_; }
};

} // namespace sgc::rt
