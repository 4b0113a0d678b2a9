// Tensor basics: factories, views, copies, dtype conversions, allocator counters.
#include <gtest/gtest.h>

#include <cstring>

#include "core/allocator.h"
#include "core/tensor.h"

using namespace kiln;

TEST(Tensor, FactoriesAndShape) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_TRUE(t.is_contiguous());
  for (double v : t.to_double_vector()) EXPECT_EQ(v, 0.0);
  Tensor f = Tensor::full({3}, 2.5, DType::bf16);
  EXPECT_EQ(f.to_double_vector(), (std::vector<double>{2.5, 2.5, 2.5}));
  EXPECT_THROW(t.size(3), Error);
}

TEST(Tensor, PermuteSliceContiguous) {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
  Tensor t = Tensor::from_vector(v, {2, 3, 4});
  Tensor p = t.permute({2, 0, 1});  // (4, 2, 3)
  EXPECT_FALSE(p.is_contiguous());
  auto pv = p.contiguous().to_float_vector();
  // p[k][i][j] = t[i][j][k] = i*12 + j*4 + k
  EXPECT_EQ(pv[0 * 6 + 1 * 3 + 2], 1 * 12 + 2 * 4 + 0);
  EXPECT_EQ(pv[3 * 6 + 0 * 3 + 1], 0 * 12 + 1 * 4 + 3);
  Tensor s = t.slice(2, 1, 4, 2);  // k = 1, 3
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  auto sv = s.to_float_vector();
  EXPECT_EQ(sv[0], 1);
  EXPECT_EQ(sv[1], 3);
  EXPECT_EQ(sv[11], 23);
  EXPECT_EQ(t.reshape({6, -1}).shape(), (Shape{6, 4}));
  EXPECT_THROW(t.reshape({5, -1}), Error);
  EXPECT_THROW(p.view({24}), Error);
  EXPECT_EQ(p.reshape({24}).to_float_vector(), pv);
}

// Strided copies between tensors of one dtype (slices, concatenations, their backwards) move the
// elements' bits: every dtype, rows contiguous on both sides (one memmove a row) and strided inner
// dims, into a strided destination, above the threaded size, and a bf16/f32 NaN keeps its payload.
TEST(Tensor, StridedCopiesKeepEveryBitInEveryDtype) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    const Shape s{6, 40, 40, 24};  // 230,400 elements: the copy's threaded loop
    std::vector<double> v(static_cast<size_t>(shape_numel(s)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 97);
    Tensor t = Tensor::from_vector(v, s, dt);
    auto at = [&](int64_t n, int64_t h, int64_t w, int64_t c) { return v[((n * 40 + h) * 40 + w) * 24 + c]; };
    // Inner dim contiguous (rows of 24 move whole), outer dims strided.
    Tensor a = t.slice(1, 1, 40, 2).slice(2, 0, 40, 3).contiguous();
    ASSERT_EQ(a.shape(), (Shape{6, 20, 14, 24}));
    std::vector<double> av = a.to_double_vector();
    for (int64_t n = 0, i = 0; n < 6; ++n)
      for (int64_t h = 0; h < 20; ++h)
        for (int64_t w = 0; w < 14; ++w)
          for (int64_t c = 0; c < 24; ++c, ++i) ASSERT_EQ(av[i], at(n, 1 + 2 * h, 3 * w, c)) << i;
    // Inner dim strided on the source, then into a strided destination.
    Tensor b = t.slice(3, 5, 24, 4);
    Tensor dst = Tensor::zeros({6, 40, 40, 10}, dt);
    dst.slice(3, 0, 10, 2).copy_(b);
    std::vector<double> dv = dst.to_double_vector();
    for (int64_t r = 0; r < 6 * 40 * 40; ++r)
      for (int64_t c = 0; c < 10; ++c)
        ASSERT_EQ(dv[r * 10 + c], c % 2 ? 0.0 : v[r * 24 + 5 + 4 * (c / 2)]) << r << " " << c;
  }
  // NaN payloads survive a strided copy (the bits, not a round trip through double).
  Tensor bf = Tensor::zeros({4, 8}, DType::bf16), f = Tensor::zeros({4, 8}, DType::f32);
  static_cast<uint16_t*>(bf.raw_data())[2 * 8 + 3] = 0x7f81;  // a signalling NaN
  uint32_t payload = 0x7fa00001;
  std::memcpy(static_cast<float*>(f.raw_data()) + 2 * 8 + 3, &payload, 4);
  Tensor bfc = bf.slice(0, 0, 4, 2).contiguous(), fc = f.slice(0, 0, 4, 2).contiguous();
  EXPECT_EQ(static_cast<const uint16_t*>(bfc.raw_data())[1 * 8 + 3], 0x7f81);
  uint32_t got = 0;
  std::memcpy(&got, static_cast<const float*>(fc.raw_data()) + 1 * 8 + 3, 4);
  EXPECT_EQ(got, payload);
}

TEST(Tensor, DtypeConversionsRoundTrip) {
  Tensor t = Tensor::from_vector(std::vector<float>{1.0f, -2.5f, 3.140625f, 65504.0f, 1e-6f}, {5});
  auto bf = t.to(DType::bf16).to(DType::f32).to_float_vector();
  EXPECT_FLOAT_EQ(bf[0], 1.0f);
  EXPECT_FLOAT_EQ(bf[1], -2.5f);
  EXPECT_FLOAT_EQ(bf[2], 3.140625f);
  auto h = t.to(DType::f16).to(DType::f32).to_float_vector();
  EXPECT_FLOAT_EQ(h[3], 65504.0f);  // largest half
  EXPECT_NEAR(h[4], 1e-6f, 1e-7f);  // subnormal half
  EXPECT_EQ(f16_to_float(float_to_f16(1e6f)), std::numeric_limits<float>::infinity());
  // bf16 rounds to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  Tensor i = Tensor::from_vector(std::vector<int64_t>{3, -1, 7}, {3});
  EXPECT_EQ(i.to(DType::i32).to_int_vector(), (std::vector<int64_t>{3, -1, 7}));
}

TEST(Allocator, CountersReturnAfterFree) {
  auto before = memory_stats();
  {
    Tensor a = Tensor::empty({1000, 1000});
    Tensor b = Tensor::empty({333});
    auto during = memory_stats();
    EXPECT_GE(during.allocated, before.allocated + 4000000 + 333 * 4);
    EXPECT_GE(during.peak, during.allocated);
  }
  auto after = memory_stats();
  EXPECT_EQ(after.allocated, before.allocated);
  // The freed blocks are cached and reused: a second round needs no new system allocation.
  size_t sys = after.num_system_allocs;
  { Tensor a = Tensor::empty({1000, 1000}); }
  EXPECT_EQ(memory_stats().num_system_allocs, sys);
}

TEST(Allocator, PeakAndLimit) {
  CachingAllocator& a = allocator_for(Device::cpu());
  a.reset_peak();
  size_t base = a.stats().allocated;
  { Tensor t = Tensor::empty({1 << 20}); }
  EXPECT_GE(a.stats().peak, base + (4u << 20));
  a.set_limit(base + (1u << 20));
  EXPECT_THROW(Tensor::empty({1 << 20}), OutOfMemoryError);
  a.set_limit(0);
  EXPECT_EQ(a.stats().allocated, base);
}

TEST(Device, ParseErrorsNameTheInput) {
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  try {
    parse_device("tpu");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tpu"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("accepted"), std::string::npos);
  }
  if (cuda_device_count() == 0) {
    EXPECT_THROW(parse_device_list("0,1"), Error);
  }
  EXPECT_EQ(parse_device_list("cpu").size(), 1u);
  // A GPU that is not there: one line naming the request and what is available.
  try {
    parse_device("cuda:" + std::to_string(cuda_device_count()));
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("device=cuda:" + std::to_string(cuda_device_count()) + ": this machine has no such GPU; available: cpu"),
              std::string::npos) << m;
    if (cuda_device_count() == 0 && cuda_compiled()) {
      EXPECT_NE(m.find("cpu (no CUDA device visible)"), std::string::npos) << m;
    }
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // The default: the first GPU when there is one, else the CPU.
  EXPECT_EQ(parse_device_list("").front(), cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu());
}
