// ops::normalize_u8 on the CPU (core/cpu/normalize_u8.cpp) against data/normalize.cpp's formula
// written out here in double: f32 bit for bit, bf16/f16 the f32 value rounded to nearest even;
// broadcasting of one mean/std, strided inputs, and the errors of bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/ops/normalize_u8.h"

using namespace kiln;

namespace {

// Every byte value in every channel, then a pseudo-random tail: (n, h, w, c) u8.
Tensor bytes(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i < 256 * s.back() ? (i / s.back()) % 256 : (i * 2654435761u >> 7) % 256);
  return Tensor::from_vector(v, s, DType::f64).to(DType::u8);
}

// data/normalize.cpp: static_cast<float>((v / 255.0 - m) / s), in double, rounded once.
float reference(int v, double m, double s) { return static_cast<float>((v / 255.0 - m) / s); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(NormalizeU8, F32IsTheCpuPipelinesFormulaBitForBit) {
  const std::vector<double> mean = {0.485, 0.456, 0.406}, std = {0.229, 0.224, 0.225};
  for (const Shape& shape : {Shape{1, 1, 1, 3}, Shape{2, 16, 17, 3}, Shape{3, 40, 33, 3}}) {
    Tensor x = bytes(shape);
    Tensor y = ops::normalize_u8(x, mean, std, DType::f32);
    ASSERT_EQ(y.shape(), shape);
    ASSERT_EQ(y.dtype(), DType::f32);
    ASSERT_TRUE(y.device().is_cpu());
    const std::vector<double> xv = x.to_double_vector();
    const float* yv = y.data<float>();
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t c = i % 3;
      ASSERT_EQ(yv[i], reference(static_cast<int>(xv[i]), mean[c], std[c])) << shape_str(shape) << " element " << i;
    }
  }
}

TEST(NormalizeU8, Bf16AndF16AreTheF32ValueRoundedToNearestEven) {
  const std::vector<double> mean = {0.5, 0.25}, std = {0.3, 0.125};
  Tensor x = bytes({2, 20, 13, 2});
  const std::vector<double> xv = x.to_double_vector();
  for (DType t : {DType::bf16, DType::f16}) {
    Tensor y = ops::normalize_u8(x, mean, std, t);
    ASSERT_EQ(y.dtype(), t);
    const uint16_t* yv = static_cast<const uint16_t*>(y.raw_data());
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t c = i % 2;
      const float f = reference(static_cast<int>(xv[i]), mean[c], std[c]);
      const uint16_t want = t == DType::bf16 ? float_to_bf16(f) : float_to_f16(f);
      ASSERT_EQ(yv[i], want) << dtype_name(t) << " element " << i;
      // and so within half a unit in the last place of the exact value (2^-9 relative for bf16)
      const double exact = (xv[i] / 255.0 - mean[c]) / std[c];
      const double got = t == DType::bf16 ? bf16_to_float(yv[i]) : f16_to_float(yv[i]);
      EXPECT_LE(std::abs(got - exact), std::abs(exact) * (t == DType::bf16 ? 0x1p-8 : 0x1p-11) + 1e-7) << i;
    }
  }
}

TEST(NormalizeU8, OneValueForAllChannelsAndStridedInput) {
  Tensor x = bytes({2, 9, 8, 3});
  Tensor one = ops::normalize_u8(x, {0.5}, {0.25}, DType::f32);
  Tensor all = ops::normalize_u8(x, {0.5, 0.5, 0.5}, {0.25, 0.25, 0.25}, DType::f32);
  EXPECT_EQ(one.to_double_vector(), all.to_double_vector());
  // a non-contiguous view (every other column) gives the values of its packed copy
  Tensor view = x.slice(2, 0, 4);
  ASSERT_FALSE(view.is_contiguous());
  EXPECT_EQ(ops::normalize_u8(view, {0.1, 0.2, 0.3}, {0.5, 0.6, 0.7}, DType::f32).to_double_vector(),
            ops::normalize_u8(view.contiguous(), {0.1, 0.2, 0.3}, {0.5, 0.6, 0.7}, DType::f32).to_double_vector());
  // grey images: one channel
  Tensor g = bytes({4, 7, 7, 1});
  Tensor yg = ops::normalize_u8(g, {0.286}, {0.353}, DType::f32);
  const std::vector<double> gv = g.to_double_vector();
  for (size_t i = 0; i < gv.size(); ++i) ASSERT_EQ(yg.data<float>()[i], reference(static_cast<int>(gv[i]), 0.286, 0.353));
}

TEST(NormalizeU8, BadArgumentsNameTheOpAndWhatIsAccepted) {
  Tensor x = bytes({2, 4, 4, 3});
  const std::string wrong_dtype = error_of([&] { ops::normalize_u8(x.to(DType::f32), {0.5}, {0.2}, DType::f32); });
  EXPECT_NE(wrong_dtype.find("normalize_u8: x must be a u8 tensor"), std::string::npos) << wrong_dtype;
  const std::string channels = error_of([&] { ops::normalize_u8(x, {0.5, 0.4}, {0.2}, DType::f32); });
  EXPECT_NE(channels.find("mean has 2 values"), std::string::npos) << channels;
  EXPECT_NE(channels.find("3 channels"), std::string::npos) << channels;
  const std::string stds = error_of([&] { ops::normalize_u8(x, {0.5}, {0.2, 0.3, 0.4, 0.5}, DType::f32); });
  EXPECT_NE(stds.find("std has 4 values"), std::string::npos) << stds;
  const std::string out = error_of([&] { ops::normalize_u8(x, {0.5}, {0.2}, DType::i64); });
  EXPECT_NE(out.find("accepted: f32, bf16, f16"), std::string::npos) << out;
  const std::string zero = error_of([&] { ops::normalize_u8(x, {0.5}, {0.2, 0.0, 0.1}, DType::f32); });
  EXPECT_NE(zero.find("std[1] is zero"), std::string::npos) << zero;
  const std::string many = error_of([&] { ops::normalize_u8(bytes({1, 2, 2, 17}), {0.5}, {0.2}, DType::f32); });
  EXPECT_NE(many.find("accepted: 1 to 16"), std::string::npos) << many;
}
