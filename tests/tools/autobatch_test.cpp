// AutoBatch: the fitted line, the fraction, OOM probes.
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/tensor.h"
#include "tools/autobatch.h"

using namespace kiln;

TEST(AutoBatch, FitsTheLineAndRespectsTheFraction) {
  // A "model" with 100 MiB fixed and 3 MiB per sample.
  const double MiB = 1 << 20;
  auto probe = [&](int64_t b) { return 100 * MiB + 3 * MiB * b; };
  AutoBatchOptions opt;
  opt.fraction = 0.6;
  AutoBatchResult r = auto_batch(probe, 2000 * MiB, opt);
  EXPECT_NEAR(r.fixed_bytes, 100 * MiB, 1);
  EXPECT_NEAR(r.per_sample_bytes, 3 * MiB, 1);
  EXPECT_EQ(r.batch, 366);  // (1200 - 100) / 3 = 366.7
  EXPECT_LE(probe(r.batch), 0.6 * 2000 * MiB);
  EXPECT_GT(probe(r.batch + 1), 0.6 * 2000 * MiB);
  opt.multiple_of = 8;
  EXPECT_EQ(auto_batch(probe, 2000 * MiB, opt).batch, 360);
}

TEST(AutoBatch, MeasuresRealAllocatorPeaksAndSkipsOomProbes) {
  // Probes allocate real tensors under an allocator limit; the 64 probe runs out of memory.
  CachingAllocator& alloc = allocator_for(Device::cpu());
  size_t base = alloc.stats().allocated;
  alloc.set_limit(base + (40u << 20));
  auto probe = [&](int64_t b) -> double {
    alloc.reset_peak();
    size_t start = alloc.stats().allocated;
    try {
      Tensor fixed = Tensor::empty({1 << 20});                   // 4 MiB of "weights"
      Tensor act = Tensor::empty({b, 128, 1024});               // 512 KiB per sample
      Tensor grad = Tensor::empty({b, 64, 1024});               // 256 KiB per sample
      return static_cast<double>(alloc.stats().peak - start);
    } catch (const OutOfMemoryError&) {
      return -1;
    }
  };
  AutoBatchOptions opt;
  opt.fraction = 0.5;
  AutoBatchResult r = auto_batch(probe, 40.0 * (1 << 20), opt);
  alloc.set_limit(0);
  ASSERT_EQ(r.measured.size(), 3u);  // 8, 16, 32 fit; 64 needs 52 MiB
  EXPECT_NEAR(r.per_sample_bytes, 768.0 * 1024, 1024);
  EXPECT_NEAR(r.fixed_bytes, 4.0 * (1 << 20), 64 * 1024);
  EXPECT_EQ(r.batch, 21);  // (20 MiB - 4 MiB) / 0.75 MiB = 21.3
  EXPECT_NE(r.report().find("batch 21"), std::string::npos);
}

TEST(AutoBatch, NothingFitsIsAClearError) {
  EXPECT_THROW(auto_batch([](int64_t) { return -1.0; }, 1e9, AutoBatchOptions()), Error);
}
