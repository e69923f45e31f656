//===- HostConversionTest.cpp - the host's bf16 / f16 conversions ----------===//
//
// Every 16-bit pattern of each format: its value (from the format's
// definition), its round trip, and the rounding of the midpoints to each
// neighbour (ties to even) and of the floats beside them; NaN, infinities,
// overflow, subnormals and signed zero. And loadElement / storeElement,
// which read and write host arrays of any dtype through them.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/DeviceBuffer.h"

using namespace tilejit;

namespace {

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// A 16-bit float format: `mantBits` stored mantissa bits, the rest exponent.
struct Format {
  const char *name;
  int mantBits, bias;
  float (*toFloat)(uint16_t);
  uint16_t (*fromFloat)(float);
  int expBits() const { return 15 - mantBits; }
  int maxExp() const { return (1 << expBits()) - 1; }
  bool isNaN(uint16_t h) const {
    return ((h >> mantBits) & maxExp()) == maxExp() && (h & ((1 << mantBits) - 1)) != 0;
  }
  /// The value of pattern `h` from the format's definition, in double.
  double value(uint16_t h) const {
    int sign = h >> 15, exp = (h >> mantBits) & maxExp(), mant = h & ((1 << mantBits) - 1);
    double v;
    if (exp == maxExp())
      v = mant ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
    else if (exp == 0)
      v = std::ldexp(double(mant), 1 - bias - mantBits);
    else
      v = std::ldexp(double(mant + (1 << mantBits)), exp - bias - mantBits);
    return sign ? -v : v;
  }
};

void PrintTo(const Format &f, std::ostream *os) { *os << f.name; }

const Format kBf16{"bf16", 7, 127, bf16ToFloat, floatToBf16};
const Format kF16{"f16", 10, 15, f16ToFloat, floatToF16};

class HostConversion : public ::testing::TestWithParam<Format> {};

TEST_P(HostConversion, EveryPatternHasItsValueAndRoundTrips) {
  const Format &f = GetParam();
  int nans = 0;
  for (uint32_t p = 0; p <= 0xffff; ++p) {
    uint16_t h = uint16_t(p);
    float v = f.toFloat(h);
    double want = f.value(h);
    if (f.isNaN(h)) {
      ASSERT_TRUE(std::isnan(v)) << std::hex << p;
      ASSERT_TRUE(f.isNaN(f.fromFloat(v))) << std::hex << p << ": a NaN stays a NaN";
      ++nans;
      continue;
    }
    ASSERT_EQ(double(v), want) << std::hex << p;
    ASSERT_EQ(std::signbit(v), bool(h >> 15)) << std::hex << p << ": the sign, zero's too";
    ASSERT_EQ(f.fromFloat(v), h) << std::hex << p << " (" << v << ") does not round-trip";
  }
  EXPECT_EQ(nans, 2 * ((1 << f.mantBits) - 1));
}

TEST_P(HostConversion, MidpointsRoundToEvenAndTheirNeighboursToTheNearest) {
  const Format &f = GetParam();
  const uint16_t inf = uint16_t(f.maxExp() << f.mantBits);
  for (uint16_t sign : {uint16_t(0), uint16_t(0x8000)}) {
    // Every finite magnitude and the next one up (the largest's is infinity:
    // the midpoint there is where rounding overflows).
    for (uint32_t m = 0; m < inf; ++m) {
      uint16_t lo = uint16_t(sign | m), hi = uint16_t(sign | (m + 1));
      double a = f.value(lo);
      double b =
          m + 1 == inf ? std::ldexp(1.0, f.maxExp() - f.bias) * (sign ? -1 : 1) : f.value(hi);
      double mid = (a + b) / 2;
      float midF = float(mid);
      ASSERT_EQ(double(midF), mid) << std::hex << m << ": the midpoint is a float";
      uint16_t even = (m & 1) ? hi : lo;
      ASSERT_EQ(f.fromFloat(midF), even) << f.name << " midpoint above " << std::hex << lo;
      float above = std::nextafter(midF, sign ? -INFINITY : INFINITY);
      float below = std::nextafter(midF, 0.0f);
      ASSERT_EQ(f.fromFloat(above), hi) << std::hex << lo;
      ASSERT_EQ(f.fromFloat(below), lo) << std::hex << lo;
    }
  }
}

TEST_P(HostConversion, SpecialValues) {
  const Format &f = GetParam();
  const uint16_t inf = uint16_t(f.maxExp() << f.mantBits);
  EXPECT_EQ(f.fromFloat(INFINITY), inf);
  EXPECT_EQ(f.fromFloat(-INFINITY), inf | 0x8000);
  EXPECT_EQ(f.fromFloat(std::numeric_limits<float>::max()), inf);
  EXPECT_EQ(f.fromFloat(-std::numeric_limits<float>::max()), inf | 0x8000);
  EXPECT_EQ(f.fromFloat(0.0f), 0);
  EXPECT_EQ(f.fromFloat(-0.0f), 0x8000);
  for (uint32_t payload : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fffffffu, 0xff800001u})
    EXPECT_TRUE(f.isNaN(f.fromFloat(floatOf(payload)))) << std::hex << payload;
  // The smallest float subnormal: zero in f16, the smallest subnormal's
  // neighbourhood in bf16 (whose exponent range is float's).
  float tiny = floatOf(1);
  EXPECT_EQ(f.fromFloat(tiny), 0) << "rounds to zero";
  EXPECT_EQ(f.fromFloat(-tiny), 0x8000);
  uint16_t minSub = 1;
  EXPECT_EQ(f.fromFloat(f.toFloat(minSub)), minSub);
  EXPECT_EQ(f.fromFloat(float(f.value(minSub) * 0.75)), minSub) << "above half rounds up";
  EXPECT_EQ(f.fromFloat(float(f.value(minSub) * 0.5)), 0) << "the tie goes to even: zero";
  EXPECT_EQ(f.fromFloat(float(f.value(minSub) * 1.5)), 2) << "the tie goes to even: 2";
}

#if defined(__FLT16_MAX__)
// The compiler's _Float16 conversion (IEEE, round to nearest even) agrees on
// floats spread over every exponent.
TEST(HostConversionF16, AgreesWithTheCompilersFloat16) {
  for (uint64_t u = 0; u <= 0xffffffffull; u += 1031) {
    float v = floatOf(uint32_t(u));
    uint16_t got = floatToF16(v);
    _Float16 h = _Float16(v);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    if (std::isnan(v)) {
      ASSERT_TRUE(kF16.isNaN(got)) << std::hex << u;
      continue;
    }
    ASSERT_EQ(got, want) << std::hex << u << " (" << v << ")";
  }
}
#endif

INSTANTIATE_TEST_SUITE_P(Formats, HostConversion, ::testing::Values(kBf16, kF16),
                         [](const ::testing::TestParamInfo<Format> &i) {
                           return std::string(i.param.name);
                         });

TEST(HostElements, StoreWritesItsElementOnlyAndLoadReadsItBack) {
  for (DType t : {DType::BF16, DType::F16, DType::F32}) {
    SCOPED_TRACE(dtypeName(t));
    size_t size = dtypeBytes(t);
    for (size_t offset : {0, 1, 3}) { // unaligned base addresses too
      unsigned char buf[64];
      std::memset(buf, 0xAB, sizeof buf);
      unsigned char *base = buf + offset;
      storeElement(base, t, 5, -2.5f);
      for (size_t i = 0; i < sizeof buf; ++i) {
        bool mine = i >= offset + 5 * size && i < offset + 6 * size;
        if (!mine) {
          ASSERT_EQ(buf[i], 0xAB) << "byte " << i << " written";
        }
      }
      EXPECT_EQ(loadElement(base, t, 5), -2.5f);
      // Little-endian, in the dtype's own encoding.
      uint32_t want = t == DType::F32 ? bitsOf(-2.5f) : t == DType::BF16 ? 0xc020 : 0xc100;
      uint32_t got = 0;
      std::memcpy(&got, base + 5 * size, size);
      EXPECT_EQ(got, want) << std::hex << got;
    }
  }
}

TEST(HostElements, StoreRoundsToTheDtypeAndF32IsBitExact) {
  unsigned char buf[8];
  storeElement(buf, DType::BF16, 1, 1.0f + 0x1p-8f); // a tie: to even, 1.0
  EXPECT_EQ(buf[2], 0x80);
  EXPECT_EQ(buf[3], 0x3f);
  storeElement(buf, DType::BF16, 1, 1.0f + 0x1p-8f + 0x1p-20f);
  EXPECT_EQ(loadElement(buf, DType::BF16, 1), 1.0f + 0x1p-7f);
  storeElement(buf, DType::F16, 2, 1.0f + 0x1p-11f); // a tie: to even, 1.0
  EXPECT_EQ(loadElement(buf, DType::F16, 2), 1.0f);
  storeElement(buf, DType::F16, 2, 70000.0f);
  EXPECT_EQ(loadElement(buf, DType::F16, 2), INFINITY);
  for (uint32_t bits : {0x7fc00001u, 0x80000001u, 0x00000001u, 0xff800000u}) {
    storeElement(buf, DType::F32, 1, floatOf(bits));
    EXPECT_EQ(bitsOf(loadElement(buf, DType::F32, 1)), bits) << std::hex << bits;
  }
}

} // namespace
