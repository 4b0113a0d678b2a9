// bf16 <-> f32 row conversions (core/ops/bf16_rows.h): the same bits as the scalar float_to_bf16 /
// bf16_to_float for every kind of value (ties, NaN, infinities, denormals, signed zeros) and every
// length (vector tails).
#include "core/ops/bf16_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"

using namespace kiln;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST(Bf16Rows, MatchScalarConversion) {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.5f, 3.14159f, 1e-40f, -1e-42f, 1e38f, 3.4e38f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), from_bits(0x7f800001u),  // signalling NaN
                          from_bits(0x3f808000u), from_bits(0x3f818000u),  // ties: to even, down and up
                          from_bits(0x3f80ffffu), from_bits(0x00008000u), from_bits(0x7f7fffffu)};
  uint32_t x = 12345;
  while (v.size() < 100) {  // and pseudo-random bit patterns
    x = x * 1664525u + 1013904223u;
    v.push_back(from_bits(x));
  }
  for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{33}, v.size()}) {
    SCOPED_TRACE(n);
    std::vector<uint16_t> got(n + 1, 0xabcd);
    ops::f32_to_bf16(v.data(), got.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], float_to_bf16(v[i])) << "value " << i;
    EXPECT_EQ(got[n], 0xabcd) << "wrote past the end";
    std::vector<float> back(n + 1, 7.0f);
    ops::bf16_to_f32(got.data(), back.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      float want = bf16_to_float(got[i]);
      EXPECT_EQ(std::memcmp(&back[i], &want, 4), 0) << "value " << i;
    }
    EXPECT_EQ(back[n], 7.0f) << "wrote past the end";
  }
}
