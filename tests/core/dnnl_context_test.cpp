// core/dnnl_context: the primitive cache (LRU bound, one entry per key under threads, type checks),
// onednn::SerialScope, and the reorder helpers (a blocked round trip returns the data unchanged).
#include "core/dnnl_context.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <thread>

#include "tests/expect_error.h"
#include "tests/gradcheck.h"

using namespace kiln;

TEST(DnnlContext, CacheKeysSeparateEveryField) {
  // The thread count leads the key: a primitive is made for the threads it runs with.
  EXPECT_EQ(onednn::CacheKey("op").add(Shape{2, 3}).add(int64_t{1}).add(DType::bf16).str(),
            std::to_string(omp_get_max_threads()) + "|op|2,3,|1|bf16|");
  EXPECT_NE(onednn::CacheKey("op").add(Shape{2, 3}).add(Shape{4}).str(),
            onednn::CacheKey("op").add(Shape{2}).add(Shape{3, 4}).str());
}

TEST(DnnlContext, CacheIsBoundedLruAndTyped) {
  onednn::PrimitiveCache cache(2);
  int made = 0;
  auto get = [&](const char* k) {
    return *cache.get_or_create<int>(onednn::CacheKey(k), [&] {
      ++made;
      return std::make_shared<const int>(made);
    });
  };
  EXPECT_EQ(get("a"), 1);
  EXPECT_EQ(get("b"), 2);
  EXPECT_EQ(get("a"), 1);  // hit, and now the most recent
  EXPECT_EQ(get("c"), 3);  // evicts b, the least recently used
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(get("a"), 1);
  EXPECT_EQ(get("b"), 4);  // made again
  kiln::testing::expect_error(
      [&] { cache.get_or_create<double>(onednn::CacheKey("b"), [] { return std::make_shared<const double>(1.0); }); },
      {"primitive cache", "another entry type"});
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
}

TEST(DnnlContext, ConcurrentLookupsShareOneEntry) {
  onednn::PrimitiveCache cache(16);
  std::atomic<int> made{0};
  std::vector<const int*> seen(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      auto v = cache.get_or_create<int>(onednn::CacheKey("shared"), [&] {
        ++made;
        return std::make_shared<const int>(7);
      });
      seen[t] = v.get();
    });
  for (auto& th : threads) th.join();
  // Several threads may build it at once, but every caller gets the one that was kept.
  for (int t = 1; t < 8; ++t) EXPECT_EQ(seen[t], seen[0]);
  EXPECT_GE(made.load(), 1);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(DnnlContext, SerialScopeRestoresTheThreadCount) {
  int before = omp_get_max_threads();
  {
    onednn::SerialScope s(true);
    EXPECT_EQ(omp_get_max_threads(), 1);
    onednn::SerialScope inner(false);
    EXPECT_EQ(omp_get_max_threads(), 1);
  }
  EXPECT_EQ(omp_get_max_threads(), before);
}

TEST(DnnlContext, ReorderRoundTripThroughABlockedLayout) {
  using dnnl::memory;
  // NHWC (2, 5, 3, 11) -> nChw8c (channels padded to 16) -> NHWC; both a small (serial) and a
  // large (parallel) tensor.
  for (int64_t c : {int64_t{11}, int64_t{600}}) {
    SCOPED_TRACE(c);
    Tensor x = kiln::testing::randn({2, 5, 3, c}, 3);
    memory::desc plain({2, c, 5, 3}, memory::data_type::f32, memory::format_tag::nhwc);
    memory::desc blocked({2, c, 5, 3}, memory::data_type::f32, memory::format_tag::nChw8c);
    onednn::Reordered r = onednn::reorder_to(onednn::wrap(plain, x), x, blocked);
    EXPECT_TRUE(r.mem.get_desc() == blocked);
    EXPECT_FALSE(r.buffer.same(x));
    onednn::Reordered same = onednn::reorder_to(onednn::wrap(plain, x), x, plain);
    EXPECT_TRUE(same.buffer.same(x)) << "no copy when the layouts agree";
    Tensor back = Tensor::empty(x.shape());
    onednn::OutputMemory out(blocked, plain, back);
    std::memcpy(out.mem().get_data_handle(), r.mem.get_data_handle(), blocked.get_size());
    out.finish();
    kiln::testing::expect_close(back, x.to_double_vector(), 0, 0, "round trip");
  }
}
