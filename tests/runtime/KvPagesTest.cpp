// The paged cache's bookkeeping (runtime/KvPages): prefix pages kept after
// their last sequence is freed, shared by a later prompt, and given out last,
// forgotten with the pages remembered after them as they are taken.
#include "runtime/KvPages.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

using sgc::rt::KvPages;

namespace {

constexpr int32_t kBlock = 4;

/// A sequence holding `prompt`, remembered as a prompt is once its tokens are computed.
int32_t addPrompt(KvPages& pages, const std::vector<int64_t>& prompt) {
  int32_t seq = pages.addSequence();
  int32_t shared = pages.sharePrefix(seq, prompt.data(), (int32_t)prompt.size());
  std::vector<std::pair<int32_t, int32_t>> copies;
  pages.append(seq, (int32_t)prompt.size() - shared, copies);
  pages.remember(seq, prompt.data(), (int32_t)prompt.size());
  return seq;
}

std::vector<int64_t> tokens(int64_t first, int32_t n) {
  std::vector<int64_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

} // namespace

TEST(KvPages, AFreedPromptsPagesServeTheNextOne) {
  KvPages pages(8, kBlock, 4, 4);
  std::vector<int64_t> prompt = tokens(100, 10); // two full pages and two tokens
  int32_t a = addPrompt(pages, prompt);
  std::vector<int32_t> held(pages.tables().begin(), pages.tables().begin() + 2);
  pages.release(a);
  EXPECT_EQ(pages.check(), "");
  EXPECT_EQ(pages.cachedPages(), 2); // the full pages keep their bytes; the partial one is plain free
  EXPECT_EQ(pages.freePages(), 8);
  int32_t b = pages.addSequence();
  EXPECT_EQ(pages.sharePrefix(b, prompt.data(), (int32_t)prompt.size()), 2 * kBlock);
  EXPECT_EQ(std::vector<int32_t>(pages.tables().begin() + b * 4, pages.tables().begin() + b * 4 + 2), held);
  EXPECT_EQ(pages.cachedPages(), 0);
  EXPECT_EQ(pages.check(), "");
}

TEST(KvPages, CachedPagesAreTakenLastAndForgottenWithTheirSuccessors) {
  KvPages pages(8, kBlock, 4, 8);
  std::vector<int64_t> prompt = tokens(100, 9);
  pages.release(addPrompt(pages, prompt)); // pages 0, 1 cached; 2 plain free
  ASSERT_EQ(pages.cachedPages(), 2);
  // Six pages of other tokens take the six plain free pages: the cached ones stay.
  int32_t other = addPrompt(pages, tokens(500, 6 * kBlock));
  EXPECT_EQ(pages.cachedPages(), 2);
  EXPECT_EQ(pages.check(), "");
  // One more page takes the oldest cached one, the prompt's first page; its second page, found
  // only through the first, is forgotten with it (a plain free page now).
  std::vector<std::pair<int32_t, int32_t>> copies;
  pages.append(other, 1, copies);
  EXPECT_EQ(pages.cachedPages(), 0);
  EXPECT_EQ(pages.freePages(), 1);
  EXPECT_EQ(pages.check(), "");
  int32_t again = pages.addSequence();
  EXPECT_EQ(pages.sharePrefix(again, prompt.data(), (int32_t)prompt.size()), 0);
}
