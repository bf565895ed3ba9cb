// The scalar conversions of core/half.h against independent oracles: every
// 16-bit pattern round-trips, NaN stays NaN, rounding is to nearest even
// (exhaustively at every midpoint), overflow goes to infinity, subnormals are
// exact.
#include "core/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace fsdpa::detail {
namespace {

// Independent decoders, written from the IEEE formats with ldexp.
double f16_value(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double v;
  if (exponent == 0x1f)
    v = mantissa ? std::numeric_limits<double>::quiet_NaN()
                 : std::numeric_limits<double>::infinity();
  else if (exponent == 0)
    v = std::ldexp(mantissa, -24);
  else
    v = std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -v : v;
}

double bf16_value(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 7) & 0xff, mantissa = h & 0x7f;
  double v;
  if (exponent == 0xff)
    v = mantissa ? std::numeric_limits<double>::quiet_NaN()
                 : std::numeric_limits<double>::infinity();
  else if (exponent == 0)
    v = std::ldexp(mantissa, -133);
  else
    v = std::ldexp(128 + mantissa, exponent - 134);
  return sign ? -v : v;
}

TEST(Half, F16DecodesEveryPattern) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const double want = f16_value(h);
    const float got = f16_to_float(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << bits;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << bits;
      ASSERT_EQ(std::signbit(got), (bits & 0x8000) != 0) << std::hex << bits;
    }
  }
}

TEST(Half, Bf16DecodesEveryPattern) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const double want = bf16_value(h);
    const float got = bf16_to_float(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << bits;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << bits;
    }
  }
}

TEST(Half, RoundTripEveryPattern) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float f = f16_to_float(h);
    const float b = bf16_to_float(h);
    if (std::isnan(f)) {
      const uint16_t back = float_to_f16(f);
      ASSERT_TRUE(std::isnan(f16_to_float(back))) << "f16 NaN " << std::hex << bits;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << "f16 NaN sign " << std::hex << bits;
    } else {
      ASSERT_EQ(float_to_f16(f), h) << "f16 " << std::hex << bits;
    }
    if (std::isnan(b)) {
      const uint16_t back = float_to_bf16(b);
      ASSERT_TRUE(std::isnan(bf16_to_float(back))) << "bf16 NaN " << std::hex << bits;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << "bf16 NaN sign " << std::hex << bits;
    } else {
      ASSERT_EQ(float_to_bf16(b), h) << "bf16 " << std::hex << bits;
    }
  }
}

// Every float NaN (quiet or signalling, any payload) stays NaN; a payload
// living only in the low bits must not truncate to infinity.
TEST(Half, NaNStaysNaN) {
  for (uint32_t payload : {1u, 2u, 0x1fffu, 0xffffu, 0x10000u, 0x3fffffu, 0x400000u, 0x7fffffu}) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float nan = bits_to_float(sign | 0x7f800000u | payload);
      ASSERT_TRUE(std::isnan(nan));
      EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(nan)))) << std::hex << payload;
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(nan)))) << std::hex << payload;
    }
  }
}

// At the midpoint of every pair of adjacent finite values, the conversion
// picks the one with an even mantissa; just off the midpoint it picks the
// nearer one. This covers subnormals, the subnormal/normal boundary and the
// top of the range.
template <typename Decode, typename Encode>
void check_midpoints(Decode decode, Encode encode, uint16_t max_finite, const char* what) {
  for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
    for (uint32_t m = 0; m < max_finite; ++m) {
      const uint16_t lo = static_cast<uint16_t>(sign | m);
      const uint16_t hi = static_cast<uint16_t>(sign | (m + 1));
      const double a = decode(lo), b = decode(hi);
      const double mid = (a + b) / 2;  // exact in float: one more bit than the 16-bit type
      const float fmid = static_cast<float>(mid);
      ASSERT_EQ(static_cast<double>(fmid), mid);
      const uint16_t even = (m & 1) ? hi : lo;
      ASSERT_EQ(encode(fmid), even) << what << " midpoint of " << std::hex << lo;
      const float below = std::nextafter(fmid, static_cast<float>(a));
      const float above = std::nextafter(fmid, static_cast<float>(b));
      ASSERT_EQ(encode(below), lo) << what << " below midpoint of " << std::hex << lo;
      ASSERT_EQ(encode(above), hi) << what << " above midpoint of " << std::hex << lo;
    }
  }
}

TEST(Half, F16RoundsToNearestEvenEverywhere) {
  check_midpoints(f16_value, float_to_f16, 0x7bff, "f16");
}

TEST(Half, Bf16RoundsToNearestEvenEverywhere) {
  check_midpoints(bf16_value, float_to_bf16, 0x7f7f, "bf16");
}

TEST(Half, TiesToEvenExamples) {
  EXPECT_EQ(float_to_f16(1.0f + 0x1p-11f), 0x3c00);      // tie, down to even
  EXPECT_EQ(float_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie, up to even
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(float_to_f16(0x1p-25f), 0x0000);      // half the smallest subnormal: to 0
  EXPECT_EQ(float_to_f16(3 * 0x1p-25f), 0x0002);  // 1.5 subnormal ulps: to 2
  EXPECT_EQ(float_to_f16(-0x1p-25f), 0x8000);     // -0 keeps its sign
}

TEST(Half, OverflowToInfinity) {
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(65519.99f), 0x7bff);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);  // the tie above the largest finite goes up
  EXPECT_EQ(float_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(float_to_f16(-1e6f), 0xfc00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16(bits_to_float(0x7f7f7fffu)), 0x7f7f);  // just below the tie
  EXPECT_EQ(float_to_bf16(bits_to_float(0x7f7f8000u)), 0x7f80);  // tie: odd 0x7f7f rounds up
}

TEST(Half, Subnormals) {
  EXPECT_EQ(float_to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(float_to_f16(0x3ffp-24f), 0x03ff);  // largest subnormal
  EXPECT_EQ(float_to_f16(0x1p-14f), 0x0400);    // smallest normal
  EXPECT_EQ(f16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_float(0x83ff), -0x3ffp-24f);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_f16(1e-10f), 0x0000);
  // Float subnormals keep their top bits in bf16.
  EXPECT_EQ(float_to_bf16(bits_to_float(0x00010000u)), 0x0001);
  EXPECT_EQ(bf16_to_float(0x0001), bits_to_float(0x00010000u));
  EXPECT_EQ(float_to_bf16(bits_to_float(0x00008000u)), 0x0000);  // tie to even 0
  EXPECT_EQ(float_to_bf16(bits_to_float(0x00018000u)), 0x0002);  // tie to even 2
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
}

// Random floats against a brute-force nearest-value oracle.
TEST(Half, RandomFloatsRoundToNearest) {
  std::mt19937 engine(12345);
  for (int n = 0; n < 200000; ++n) {
    uint32_t bits = static_cast<uint32_t>(engine());
    // Bias towards the representable ranges.
    if (n % 2) bits = (bits & 0x87ffffffu) | (static_cast<uint32_t>(engine() % 40 + 100) << 23);
    const float x = bits_to_float(bits);
    if (!std::isfinite(x)) continue;
    const uint16_t h = float_to_f16(x);
    const double v = f16_value(h);
    if (std::abs(x) < 65520.0f) {
      ASSERT_TRUE(std::isfinite(v)) << x;
      // No other finite f16 of the same sign is nearer.
      for (int delta : {-1, 1}) {
        const uint32_t other = (h & 0x7fffu) + static_cast<uint32_t>(delta);
        if (other > 0x7bff) continue;
        const double w = f16_value(static_cast<uint16_t>((h & 0x8000u) | other));
        ASSERT_LE(std::abs(v - x), std::abs(w - x)) << x;
      }
    } else {
      ASSERT_TRUE(std::isinf(v)) << x;
    }
    const uint16_t b = float_to_bf16(x);
    const double bv = bf16_value(b);
    if (std::isfinite(bv))
      for (int delta : {-1, 1}) {
        const uint32_t other = (b & 0x7fffu) + static_cast<uint32_t>(delta);
        if (other > 0x7f7f) continue;
        const double w = bf16_value(static_cast<uint16_t>((b & 0x8000u) | other));
        ASSERT_LE(std::abs(bv - x), std::abs(w - x)) << x;
      }
  }
}

}  // namespace
}  // namespace fsdpa::detail
