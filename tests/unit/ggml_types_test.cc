// Tests for sift/ggml_types.h: the type table, half/bf16 conversions, and DequantizeRow for every
// supported type. Each block is packed here, byte by byte, from chosen scales and quants following
// the layouts of ggml's src/ggml-common.h; the scales are powers of two and the quants small
// integers, so the expected values are exact and compared with ==.
#include "sift/ggml_types.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "sift/error.h"

namespace sift {
namespace {

using Bytes = std::vector<uint8_t>;

void PutU16(Bytes* b, uint16_t v) {
  b->push_back(static_cast<uint8_t>(v & 0xFF));
  b->push_back(static_cast<uint8_t>(v >> 8));
}
void PutHalf(Bytes* b, float f) { PutU16(b, FloatToHalf(f)); }

float Bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

std::vector<float> Dequant(GgmlType type, const Bytes& bytes, int64_t n) {
  EXPECT_EQ(GgmlRowBytes(type, n), bytes.size());
  std::vector<float> out(static_cast<size_t>(n), -12345.0f);
  DequantizeRow(type, bytes.data(), out.data(), n);
  return out;
}

void ExpectSame(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
}

// ---- type table -----------------------------------------------------------------------------

TEST(GgmlTypesTest, TableMatchesSpec) {
  struct Row {
    GgmlType type;
    const char* name;
    int64_t block, bytes;
    bool dequant;
  };
  const Row rows[] = {
      {GgmlType::kF32, "F32", 1, 4, true},       {GgmlType::kF16, "F16", 1, 2, true},
      {GgmlType::kQ4_0, "Q4_0", 32, 18, true},   {GgmlType::kQ4_1, "Q4_1", 32, 20, true},
      {GgmlType::kQ5_0, "Q5_0", 32, 22, true},   {GgmlType::kQ5_1, "Q5_1", 32, 24, true},
      {GgmlType::kQ8_0, "Q8_0", 32, 34, true},   {GgmlType::kQ8_1, "Q8_1", 32, 36, false},
      {GgmlType::kQ2_K, "Q2_K", 256, 84, false}, {GgmlType::kQ3_K, "Q3_K", 256, 110, false},
      {GgmlType::kQ4_K, "Q4_K", 256, 144, true}, {GgmlType::kQ5_K, "Q5_K", 256, 176, true},
      {GgmlType::kQ6_K, "Q6_K", 256, 210, true}, {GgmlType::kQ8_K, "Q8_K", 256, 292, false},
      {GgmlType::kI8, "I8", 1, 1, false},        {GgmlType::kI16, "I16", 1, 2, false},
      {GgmlType::kI32, "I32", 1, 4, false},      {GgmlType::kI64, "I64", 1, 8, false},
      {GgmlType::kF64, "F64", 1, 8, false},      {GgmlType::kBF16, "BF16", 1, 2, true},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    EXPECT_STREQ(GgmlTypeName(r.type), r.name);
    EXPECT_TRUE(GgmlTypeKnown(static_cast<uint32_t>(r.type)));
    EXPECT_EQ(GgmlBlockSize(r.type), r.block);
    EXPECT_EQ(GgmlBlockBytes(r.type), r.bytes);
    EXPECT_EQ(GgmlTypeDequantizable(r.type), r.dequant);
    EXPECT_EQ(GgmlRowBytes(r.type, r.block * 3), static_cast<uint64_t>(r.bytes * 3));
  }
  for (uint32_t removed : {4u, 5u, 16u, 23u, 29u, 31u, 39u, 1000u}) {
    EXPECT_FALSE(GgmlTypeKnown(removed)) << removed;
  }
  EXPECT_STREQ(GgmlTypeName(static_cast<GgmlType>(99)), "type99");
  EXPECT_EQ(GgmlRowBytes(GgmlType::kQ4_1, 576), 360u);
  EXPECT_EQ(GgmlRowBytes(GgmlType::kQ8_0, 576), 612u);
  EXPECT_THROW(GgmlRowBytes(GgmlType::kQ4_1, 33), Error);
  EXPECT_THROW(GgmlBlockSize(static_cast<GgmlType>(99)), Error);
}

TEST(GgmlTypesTest, UnsupportedTypeThrowsNamingIt) {
  uint8_t block[292] = {};
  float out[256];
  for (GgmlType t : {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ8_1, GgmlType::kQ8_K,
                     GgmlType::kI32, GgmlType::kF64, static_cast<GgmlType>(77)}) {
    try {
      DequantizeRow(t, block, out, GgmlBlockSize(GgmlType::kQ2_K));
      ADD_FAILURE() << "no throw for " << GgmlTypeName(t);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(GgmlTypeName(t)), std::string::npos) << e.what();
    }
  }
  // A row that is not a whole number of blocks.
  EXPECT_THROW(DequantizeRow(GgmlType::kQ4_0, block, out, 31), Error);
}

// ---- half / bf16 ----------------------------------------------------------------------------

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(HalfToFloat(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xC000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));         // smallest normal
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));         // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x03FF), 1023 * std::ldexp(1.0f, -24));  // largest subnormal
  EXPECT_EQ(HalfToFloat(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7C01)));  // signalling NaN stays NaN
}

TEST(HalfTest, FloatToHalfRounding) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65519.99f), 0x7BFF);  // below the halfway point to 65536
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);   // tie, rounds to even = overflow
  EXPECT_EQ(FloatToHalf(1e9f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-1e9f), 0xFC00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  // Ties to even in the normal range: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  // Subnormals: exact, ties to even, underflow to zero, carry into the smallest normal.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even 0
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units -> 2
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25) * 1.001f), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(FloatToHalf(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);
  EXPECT_EQ(FloatToHalf(1023 * std::ldexp(1.0f, -24)), 0x03FF);
  // NaN stays a NaN.
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_NE(FloatToHalf(Bits(0x7F800001u)) & 0x03FF, 0);  // tiny payload NaN is not inf
}

TEST(HalfTest, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
    } else {
      ASSERT_EQ(FloatToHalf(f), h) << "half 0x" << std::hex << h;
    }
  }
}

#if defined(__FLT16_MAX__)
// The compiler's own float -> _Float16 conversion (correctly rounded) as an oracle.
TEST(HalfTest, MatchesCompilerConversionOnRandomFloats) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    // Bias half of the samples towards the half-precision range.
    if (i % 2) u = (u & 0x807FFFFFu) | ((96u + (u >> 24) % 50u) << 23);
    const float f = Bits(u);
    if (std::isnan(f)) continue;
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, sizeof(ref_bits));
    ASSERT_EQ(FloatToHalf(f), ref_bits) << "float bits 0x" << std::hex << u;
  }
}
#endif

TEST(BF16Test, Conversions) {
  EXPECT_EQ(BF16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(BF16ToFloat(0xC040), -3.0f);
  EXPECT_EQ(BF16ToFloat(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(BF16ToFloat(0x8000)));
  EXPECT_EQ(BF16ToFloat(0x7F80), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(BF16ToFloat(0x7FC0)));
  EXPECT_EQ(BF16ToFloat(0x0001), Bits(0x00010000u));  // subnormal
  EXPECT_EQ(FloatToBF16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBF16(Bits(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(FloatToBF16(Bits(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(FloatToBF16(Bits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(FloatToBF16(Bits(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX rounds to inf
  EXPECT_EQ(FloatToBF16(Bits(0x7F800001u)) & 0x7F80, 0x7F80);
  EXPECT_NE(FloatToBF16(Bits(0x7F800001u)) & 0x007F, 0);  // NaN stays NaN
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = BF16ToFloat(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(FloatToBF16(f), b);
    }
  }
}

// ---- plain types ----------------------------------------------------------------------------

TEST(DequantizeTest, F32F16BF16) {
  const std::vector<float> want = {0.0f, 1.0f, -2.5f, 0.125f, 65504.0f, -0.0009765625f};
  Bytes f32(want.size() * 4);
  std::memcpy(f32.data(), want.data(), f32.size());
  ExpectSame(Dequant(GgmlType::kF32, f32, 6), want);

  Bytes f16;
  for (float v : want) PutHalf(&f16, v);
  ExpectSame(Dequant(GgmlType::kF16, f16, 6), want);

  Bytes bf16;
  for (float v : {0.0f, 1.0f, -2.5f, 0.125f, 65536.0f, -0.0009765625f}) {
    PutU16(&bf16, static_cast<uint16_t>(FloatBits(v) >> 16));
  }
  ExpectSame(Dequant(GgmlType::kBF16, bf16, 6),
             {0.0f, 1.0f, -2.5f, 0.125f, 65536.0f, -0.0009765625f});
}

// ---- 32-element blocks ----------------------------------------------------------------------

TEST(DequantizeTest, Q4_0) {
  // Two blocks: d = 0.5 and d = -0.25; quants q[j] = (j*5 + b) % 16, value (q - 8) * d.
  Bytes bytes;
  std::vector<float> want;
  const float ds[] = {0.5f, -0.25f};
  for (int b = 0; b < 2; ++b) {
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = (j * 5 + b) % 16;
    PutHalf(&bytes, ds[b]);
    for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(q[j] | (q[j + 16] << 4)));
    for (int j = 0; j < 32; ++j) want.push_back(static_cast<float>(q[j] - 8) * ds[b]);
  }
  ASSERT_EQ(bytes.size(), 36u);
  ExpectSame(Dequant(GgmlType::kQ4_0, bytes, 64), want);
}

TEST(DequantizeTest, Q4_1) {
  // Low nibbles are elements 0..15, high nibbles 16..31; value q * d + m.
  Bytes bytes;
  std::vector<float> want;
  const float ds[] = {0.125f, 2.0f}, ms[] = {-1.0f, 0.5f};
  for (int b = 0; b < 2; ++b) {
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = (j * 7 + 3 * b) % 16;
    PutHalf(&bytes, ds[b]);
    PutHalf(&bytes, ms[b]);
    for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(q[j] | (q[j + 16] << 4)));
    for (int j = 0; j < 32; ++j) want.push_back(static_cast<float>(q[j]) * ds[b] + ms[b]);
  }
  ASSERT_EQ(bytes.size(), 40u);
  ExpectSame(Dequant(GgmlType::kQ4_1, bytes, 64), want);
}

// Packs 32 five-bit quants the Q5 way: low nibbles as Q4, bit 4 of element j in bit j of qh.
void PackQ5(const int* q, Bytes* bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  for (int i = 0; i < 4; ++i) bytes->push_back(static_cast<uint8_t>(qh >> (8 * i)));
  for (int j = 0; j < 16; ++j) {
    bytes->push_back(static_cast<uint8_t>((q[j] & 15) | ((q[j + 16] & 15) << 4)));
  }
}

TEST(DequantizeTest, Q5_0) {
  Bytes bytes;
  std::vector<float> want;
  const float ds[] = {0.25f, -1.0f};
  for (int b = 0; b < 2; ++b) {
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = (j * 11 + 5 * b) % 32;
    PutHalf(&bytes, ds[b]);
    PackQ5(q, &bytes);
    for (int j = 0; j < 32; ++j) want.push_back(static_cast<float>(q[j] - 16) * ds[b]);
  }
  ASSERT_EQ(bytes.size(), 44u);
  ExpectSame(Dequant(GgmlType::kQ5_0, bytes, 64), want);
}

TEST(DequantizeTest, Q5_1) {
  Bytes bytes;
  std::vector<float> want;
  const float ds[] = {0.5f, 0.0625f}, ms[] = {-4.0f, 1.5f};
  for (int b = 0; b < 2; ++b) {
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = (j * 13 + 7 * b + 1) % 32;
    PutHalf(&bytes, ds[b]);
    PutHalf(&bytes, ms[b]);
    PackQ5(q, &bytes);
    for (int j = 0; j < 32; ++j) want.push_back(static_cast<float>(q[j]) * ds[b] + ms[b]);
  }
  ASSERT_EQ(bytes.size(), 48u);
  ExpectSame(Dequant(GgmlType::kQ5_1, bytes, 64), want);
}

TEST(DequantizeTest, Q8_0) {
  Bytes bytes;
  std::vector<float> want;
  const float ds[] = {0.5f, -0.0078125f};
  for (int b = 0; b < 2; ++b) {
    PutHalf(&bytes, ds[b]);
    for (int j = 0; j < 32; ++j) {
      const int q = (j * 37 + b * 100) % 256 - 128;  // covers -128 and 127 ranges
      bytes.push_back(static_cast<uint8_t>(static_cast<int8_t>(q)));
      want.push_back(static_cast<float>(q) * ds[b]);
    }
  }
  ASSERT_EQ(bytes.size(), 68u);
  ExpectSame(Dequant(GgmlType::kQ8_0, bytes, 64), want);
}

// ---- 256-element k-quants -------------------------------------------------------------------

// Packs eight 6-bit scales and eight 6-bit mins into the 12-byte Q4_K/Q5_K layout: sub-blocks
// 0..3 in the low 6 bits of bytes 0..3 (scale) and 4..7 (min); sub-blocks 4..7 as low/high
// nibbles of bytes 8..11 plus their top two bits in the top bits of bytes 0..3 / 4..7.
void PackScalesK4(const int* sc, const int* m, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

TEST(DequantizeTest, Q4_K) {
  const float d = 0.5f, dmin = 0.25f;
  const int sc[8] = {1, 63, 17, 32, 63, 5, 48, 33};  // sub-blocks 4..7 use the high bits
  const int m[8] = {0, 7, 63, 40, 2, 63, 16, 49};
  int q[256];
  for (int e = 0; e < 256; ++e) q[e] = (e * 7 + e / 32) % 16;

  Bytes bytes;
  PutHalf(&bytes, d);
  PutHalf(&bytes, dmin);
  uint8_t scales[12];
  PackScalesK4(sc, m, scales);
  bytes.insert(bytes.end(), scales, scales + 12);
  // Chunk c (64 values): low nibbles of qs[32c..32c+31] are sub-block 2c, high nibbles 2c+1.
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      bytes.push_back(static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4)));
    }
  }
  ASSERT_EQ(bytes.size(), 144u);
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) {
    const int sb = e / 32;
    want[e] = d * static_cast<float>(sc[sb]) * static_cast<float>(q[e]) -
              dmin * static_cast<float>(m[sb]);
  }
  ExpectSame(Dequant(GgmlType::kQ4_K, bytes, 256), want);
}

TEST(DequantizeTest, Q5_K) {
  const float d = 0.25f, dmin = 0.5f;
  const int sc[8] = {3, 60, 31, 1, 16, 63, 47, 9};
  const int m[8] = {62, 0, 5, 33, 63, 12, 20, 48};
  int q[256];
  for (int e = 0; e < 256; ++e) q[e] = (e * 13 + e / 64) % 32;

  Bytes bytes;
  PutHalf(&bytes, d);
  PutHalf(&bytes, dmin);
  uint8_t scales[12];
  PackScalesK4(sc, m, scales);
  bytes.insert(bytes.end(), scales, scales + 12);
  // Fifth bit: element 64c + l (l < 32) in bit 2c of qh[l], element 64c + 32 + l in bit 2c+1.
  uint8_t qh[32] = {};
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      qh[l] |= static_cast<uint8_t>(((q[64 * c + l] >> 4) & 1) << (2 * c));
      qh[l] |= static_cast<uint8_t>(((q[64 * c + 32 + l] >> 4) & 1) << (2 * c + 1));
    }
  }
  bytes.insert(bytes.end(), qh, qh + 32);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      bytes.push_back(
          static_cast<uint8_t>((q[64 * c + l] & 15) | ((q[64 * c + 32 + l] & 15) << 4)));
    }
  }
  ASSERT_EQ(bytes.size(), 176u);
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) {
    const int sb = e / 32;
    want[e] = d * static_cast<float>(sc[sb]) * static_cast<float>(q[e]) -
              dmin * static_cast<float>(m[sb]);
  }
  ExpectSame(Dequant(GgmlType::kQ5_K, bytes, 256), want);
}

TEST(DequantizeTest, Q6_K) {
  const float d = 0.125f;
  const int8_t sc[16] = {1, -1, 127, -128, 5, 17, -33, 64, 2, -7, 9, 100, -100, 3, 0, 31};
  int q[256];  // unsigned 6-bit; the value is q - 32
  for (int e = 0; e < 256; ++e) q[e] = (e * 29 + e / 16) % 64;

  // Half n (128 values), l in 0..31: element 128n + 32k + l for k = 0..3 sits in
  //   k=0: low nibble of ql[64n + l],       bits 0-1 of qh[32n + l]
  //   k=1: low nibble of ql[64n + 32 + l],  bits 2-3
  //   k=2: high nibble of ql[64n + l],      bits 4-5
  //   k=3: high nibble of ql[64n + 32 + l], bits 6-7
  uint8_t ql[128] = {}, qh[64] = {};
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      const int* base = q + 128 * n + l;
      ql[64 * n + l] = static_cast<uint8_t>((base[0] & 15) | ((base[64] & 15) << 4));
      ql[64 * n + 32 + l] = static_cast<uint8_t>((base[32] & 15) | ((base[96] & 15) << 4));
      qh[32 * n + l] = static_cast<uint8_t>((base[0] >> 4) | ((base[32] >> 4) << 2) |
                                            ((base[64] >> 4) << 4) | ((base[96] >> 4) << 6));
    }
  }
  Bytes bytes(ql, ql + 128);
  bytes.insert(bytes.end(), qh, qh + 64);
  for (int8_t s : sc) bytes.push_back(static_cast<uint8_t>(s));
  PutHalf(&bytes, d);  // d is the last field
  ASSERT_EQ(bytes.size(), 210u);
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) want[e] = d * static_cast<float>(sc[e / 16] * (q[e] - 32));
  ExpectSame(Dequant(GgmlType::kQ6_K, bytes, 256), want);
}

TEST(DequantizeTest, RowOfManyBlocksAndUnalignedSource) {
  // Three Q8_0 blocks starting at an odd address.
  Bytes bytes(1);
  std::vector<float> want;
  for (int b = 0; b < 3; ++b) {
    PutHalf(&bytes, static_cast<float>(b + 1));
    for (int j = 0; j < 32; ++j) {
      bytes.push_back(static_cast<uint8_t>(j - 16));
      want.push_back(static_cast<float>((j - 16) * (b + 1)));
    }
  }
  std::vector<float> out(96);
  DequantizeRow(GgmlType::kQ8_0, bytes.data() + 1, out.data(), 96);
  ExpectSame(out, want);
}

}  // namespace
}  // namespace sift
