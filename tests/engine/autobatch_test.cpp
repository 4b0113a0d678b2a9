// AutoBatch: the fitted line, the fraction, OOM probes.
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/tensor.h"
#include "tools/engine/autobatch.h"

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
  opt.max_batch = 256;  // the cap wins, and the report says so
  AutoBatchResult capped = auto_batch(probe, 2000 * MiB, opt);
  EXPECT_EQ(capped.batch, 256);
  EXPECT_NE(capped.report().find("-> batch 256 (the cap; the line allows 366)"), std::string::npos) << capped.report();
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
  // The line says (20 MiB - 4 MiB) / 0.75 MiB = 21.3, but at 21 the allocator's size classes round
  // the two tensors up to 12 + 6 MiB: the check run measures 22 MiB, over the target, and AutoBatch
  // backs off to 18 (10 + 5 + 4 = 19 MiB), which it measures as well.
  ASSERT_EQ(r.backed_off, std::vector<int64_t>{21});
  EXPECT_EQ(r.batch, 18);
  EXPECT_NEAR(r.checked_peak_bytes, 19.0 * (1 << 20), 64 * 1024);
  EXPECT_NE(r.report().find("batch 21 did not fit, backed off -> batch 18 (measured 19 MiB, 95% of the target)"),
            std::string::npos) << r.report();
}

TEST(AutoBatch, NothingFitsIsAClearError) {
  EXPECT_THROW(auto_batch([](int64_t) { return -1.0; }, 1e9, AutoBatchOptions()), Error);
}

// The line predicts that 366 fits, but past 300 the step runs out of memory (a cliff the small
// probes could not see: another convolution algorithm, a bigger workspace). AutoBatch backs off
// and keeps the first batch that really runs within the target, instead of dying at the first step.
TEST(AutoBatch, BacksOffWhenTheChosenBatchDoesNotFit) {
  const double MiB = 1 << 20;
  std::vector<int64_t> ran;
  auto probe = [&](int64_t b) -> double {
    ran.push_back(b);
    if (b > 300) return -1;  // out of memory
    return 100 * MiB + 3 * MiB * b + (b > 200 ? 400 * MiB : 0);  // and a jump past 200
  };
  AutoBatchOptions opt;
  opt.multiple_of = 4;
  AutoBatchResult r = auto_batch(probe, 2000 * MiB, opt);
  // 364 is the fit's choice (366 rounded down to a multiple of 4) and runs out of memory; 3/4 of it,
  // 272, runs but overshoots (1316 MiB against 1200): scaled by target/peak it becomes 240 (1220 MiB,
  // within the 2% slack).
  EXPECT_EQ(r.backed_off, (std::vector<int64_t>{364, 272}));
  EXPECT_EQ(r.batch, 240);
  EXPECT_EQ(r.batch % 4, 0);
  EXPECT_LE(probe(r.batch), 0.6 * 2000 * MiB * 1.02);
  EXPECT_GT(r.batch, 200);  // backed off in proportion, not all the way down
  EXPECT_EQ(r.checked_peak_bytes, probe(r.batch));
  EXPECT_NE(r.report().find("batch 364 did not fit, backed off"), std::string::npos) << r.report();
}

// A probe over a library's size limit (cuDNN's 2^31 elements per tensor) throws TooLargeError, not
// a plain Error: AutoBatch counts it as "does not fit" and, told by how much the limit was exceeded,
// goes straight to the largest batch within it. The memory line alone would allow 3966.
TEST(AutoBatch, ALibraryLimitIsDoesNotFit) {
  const double MiB = 1 << 20;
  std::vector<int64_t> ran;
  auto probe = [&](int64_t b) -> double {
    ran.push_back(b);
    if (b > 100) throw TooLargeError("conv2d: a tensor of " + std::to_string(b) + "00 elements is over the limit",
                                     static_cast<double>(b) / 100);
    return 100 * MiB + 3 * MiB * b;
  };
  AutoBatchOptions opt;
  AutoBatchResult r = auto_batch(probe, 20000 * MiB, opt);
  EXPECT_EQ(r.batch, 100);
  EXPECT_EQ(r.backed_off, std::vector<int64_t>{3966});
  EXPECT_EQ(r.limit_batch, 3966);
  EXPECT_EQ(ran.back(), 100);
  EXPECT_NE(r.report().find("batch 3966 exceeds a library limit: conv2d: a tensor of 396600 elements"),
            std::string::npos)
      << r.report();
  // Without the excess (unknown), it backs off by 3/4 until the batch fits.
  ran.clear();
  auto unknown = [&](int64_t b) -> double {
    if (b > 120) throw TooLargeError("too large", 0);
    return 100 * MiB + 3 * MiB * b;
  };
  opt.max_batch = 200;
  AutoBatchResult u = auto_batch(unknown, 20000 * MiB, opt);
  EXPECT_EQ(u.backed_off, (std::vector<int64_t>{200, 150}));
  EXPECT_EQ(u.batch, 112);
  // Even the first probe over the limit: a clear error naming the limit.
  try {
    auto_batch([](int64_t) -> double { throw TooLargeError("cuDNN limit", 2.0); }, 1e9, AutoBatchOptions());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("even batch 8 exceeds a library limit (cuDNN limit)"), std::string::npos)
        << e.what();
  }
}

// Any other error from a probe (a bug, a bad config) is not "does not fit": it propagates.
TEST(AutoBatch, OtherProbeErrorsPropagate) {
  EXPECT_THROW(auto_batch([](int64_t) -> double { throw Error("bad"); }, 1e9, AutoBatchOptions()), Error);
  try {
    auto_batch([](int64_t) -> double { throw Error("bad"); }, 1e9, AutoBatchOptions());
  } catch (const OutOfMemoryError&) {
    ADD_FAILURE() << "a plain Error became an OutOfMemoryError";
  } catch (const Error&) {
  }
}
