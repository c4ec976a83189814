// Narrow float conversions against bit patterns from the IEEE 754 / OCP FP8
// definitions (round to nearest even, fn saturation).
#include "ir/Float.h"

#include <cmath>
#include <gtest/gtest.h>

using namespace sgc::ir;

TEST(Float, F16) {
  EXPECT_EQ(toF16(1.0), 0x3c00);
  EXPECT_EQ(toF16(-2.0), 0xc000);
  EXPECT_EQ(toF16(65504.0), 0x7bff);          // largest finite
  EXPECT_EQ(toF16(65520.0), 0x7c00);          // rounds to inf
  EXPECT_EQ(toF16(std::ldexp(1.0, -24)), 0x0001); // smallest subnormal
  EXPECT_EQ(toF16(1.0 + std::ldexp(1.0, -11)), 0x3c00); // tie to even (down)
  EXPECT_EQ(toF16(1.0 + 3 * std::ldexp(1.0, -11)), 0x3c02); // tie to even (up)
  EXPECT_TRUE(std::isnan(fromF16(toF16(NAN))));
  EXPECT_EQ(fromF16(0x3555), 0.333251953125);
}

TEST(Float, BF16) {
  EXPECT_EQ(toBF16(1.0), 0x3f80);
  EXPECT_EQ(toBF16(3.140625), 0x4049);
  EXPECT_EQ(toBF16(1.0 + std::ldexp(1.0, -8)), 0x3f80); // tie to even
  EXPECT_EQ(toBF16(INFINITY), 0x7f80);
  EXPECT_EQ(fromBF16(0xc040), -3.0);
}

TEST(Float, F8) {
  EXPECT_EQ(toF8E4M3FN(448.0), 0x7e);
  EXPECT_EQ(toF8E4M3FN(1000.0), 0x7e); // saturates: no infinity
  EXPECT_EQ(toF8E4M3FN(-1.0), 0xb8);
  EXPECT_TRUE(std::isnan(fromF8E4M3FN(0x7f)));
  EXPECT_EQ(fromF8E4M3FN(0x01), std::ldexp(1.0, -9));
  EXPECT_EQ(toF8E5M2(57344.0), 0x7b);
  EXPECT_EQ(toF8E5M2(INFINITY), 0x7c);
  EXPECT_EQ(fromF8E5M2(0x3c), 1.0);
}

TEST(Float, EveryF16RoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    double v = fromF16((uint16_t)b);
    if (std::isnan(v)) continue;
    EXPECT_EQ(toF16(v), b) << std::hex << b;
  }
}
