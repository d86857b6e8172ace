// ggml tensor type table and row dequantisation (ggml src/ggml-common.h, src/ggml-quants.c).
//
// Every function here is pure and thread-safe (GgmlTypeName's fallback string is thread-local).
// Block structs are never reinterpret_cast: fields are read from bytes with memcpy, so rows need
// no particular alignment. Assumes a little-endian host, like every GGUF file it reads.
#include "sift/ggml_types.h"

#include <cstring>
#include <string>

#include "sift/error.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "sift reads little-endian GGUF data and needs a little-endian host"
#endif

namespace sift {
namespace {

struct TypeTraits {
  GgmlType type;
  const char* name;
  int64_t block_size;
  int64_t block_bytes;
  bool dequantizable;
};

constexpr TypeTraits kTraits[] = {
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

const TypeTraits* FindTraits(uint32_t type) {
  for (const TypeTraits& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == type) return &t;
  }
  return nullptr;
}

const TypeTraits& TraitsOrThrow(GgmlType type) {
  const TypeTraits* t = FindTraits(static_cast<uint32_t>(type));
  SIFT_CHECK(t != nullptr, "unknown ggml type ", static_cast<uint32_t>(type));
  return *t;
}

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline float LoadHalf(const uint8_t* p) { return HalfToFloat(LoadU16(p)); }

inline uint32_t FloatBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

inline float BitsFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

// ---- 32-element block formats ---------------------------------------------------------------

void DequantQ4_0(const uint8_t* src, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += 18, y += 32) {
    const float d = LoadHalf(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
      y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantQ4_1(const uint8_t* src, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += 20, y += 32) {
    const float d = LoadHalf(src);
    const float m = LoadHalf(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
      y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

// Shared by Q5_0 (offset -16, no min) and Q5_1 (offset 0, plus min).
template <bool kHasMin>
void DequantQ5(const uint8_t* src, float* y, int64_t nblocks) {
  constexpr int kBytes = kHasMin ? 24 : 22;
  for (int64_t b = 0; b < nblocks; ++b, src += kBytes, y += 32) {
    const float d = LoadHalf(src);
    const float m = kHasMin ? LoadHalf(src + 2) : 0.0f;
    const uint8_t* p = src + (kHasMin ? 4 : 2);
    uint32_t qh;
    std::memcpy(&qh, p, sizeof(qh));
    const uint8_t* qs = p + 4;
    for (int j = 0; j < 16; ++j) {
      const int x0 = (qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
      const int x1 = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
      if (kHasMin) {
        y[j] = static_cast<float>(x0) * d + m;
        y[j + 16] = static_cast<float>(x1) * d + m;
      } else {
        y[j] = static_cast<float>(x0 - 16) * d;
        y[j + 16] = static_cast<float>(x1 - 16) * d;
      }
    }
  }
}

void DequantQ8_0(const uint8_t* src, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += 34, y += 32) {
    const float d = LoadHalf(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
  }
}

// ---- 256-element k-quant formats ------------------------------------------------------------

// 6-bit scale and min of sub-block j (0..7), packed in 12 bytes (Q4_K, Q5_K).
inline void ScaleMinK4(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void DequantQ4_K(const uint8_t* src, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += 144) {
    const float d = LoadHalf(src);
    const float dmin = LoadHalf(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* q = src + 16;
    for (int chunk = 0, is = 0; chunk < 4; ++chunk, is += 2, q += 32) {
      int sc, m;
      ScaleMinK4(is, scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      ScaleMinK4(is + 1, scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void DequantQ5_K(const uint8_t* src, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += 176) {
    const float d = LoadHalf(src);
    const float dmin = LoadHalf(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* q = src + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int chunk = 0, is = 0; chunk < 4; ++chunk, is += 2, q += 32) {
      int sc, m;
      ScaleMinK4(is, scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      ScaleMinK4(is + 1, scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0);
        *y++ = d1 * static_cast<float>(v) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] >> 4) + ((qh[l] & u2) ? 16 : 0);
        *y++ = d2 * static_cast<float>(v) - m2;
      }
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void DequantQ6_K(const uint8_t* src, float* y, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += 210) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = LoadHalf(src + 208);
    for (int n = 0; n < 2; ++n, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is + 0] * q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2] * q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4] * q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6] * q4);
      }
    }
  }
}

}  // namespace

const char* GgmlTypeName(GgmlType type) {
  if (const TypeTraits* t = FindTraits(static_cast<uint32_t>(type))) return t->name;
  thread_local std::string unknown;
  unknown = "type" + std::to_string(static_cast<uint32_t>(type));
  return unknown.c_str();
}

bool GgmlTypeKnown(uint32_t type) { return FindTraits(type) != nullptr; }

bool GgmlTypeDequantizable(GgmlType type) {
  const TypeTraits* t = FindTraits(static_cast<uint32_t>(type));
  return t != nullptr && t->dequantizable;
}

int64_t GgmlBlockSize(GgmlType type) { return TraitsOrThrow(type).block_size; }

int64_t GgmlBlockBytes(GgmlType type) { return TraitsOrThrow(type).block_bytes; }

uint64_t GgmlRowBytes(GgmlType type, int64_t n) {
  const TypeTraits& t = TraitsOrThrow(type);
  SIFT_CHECK(n >= 0 && n % t.block_size == 0, "row of ", n, " elements is not a whole number of ",
             t.name, " blocks (", t.block_size, " elements each)");
  return static_cast<uint64_t>(n / t.block_size) * static_cast<uint64_t>(t.block_bytes);
}

void DequantizeRow(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  const TypeTraits* t = FindTraits(static_cast<uint32_t>(type));
  SIFT_CHECK(t != nullptr && t->dequantizable, "cannot dequantise ggml type ", GgmlTypeName(type),
             " (", static_cast<uint32_t>(type),
             "): supported are F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K");
  SIFT_CHECK(n >= 0 && n % t->block_size == 0, "DequantizeRow: ", n, " elements is not a multiple",
             " of the ", t->name, " block size ", t->block_size);
  const int64_t nblocks = n / t->block_size;
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = LoadHalf(src + 2 * i);
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToFloat(LoadU16(src + 2 * i));
      return;
    case GgmlType::kQ4_0:
      return DequantQ4_0(src, dst, nblocks);
    case GgmlType::kQ4_1:
      return DequantQ4_1(src, dst, nblocks);
    case GgmlType::kQ5_0:
      return DequantQ5<false>(src, dst, nblocks);
    case GgmlType::kQ5_1:
      return DequantQ5<true>(src, dst, nblocks);
    case GgmlType::kQ8_0:
      return DequantQ8_0(src, dst, nblocks);
    case GgmlType::kQ4_K:
      return DequantQ4_K(src, dst, nblocks);
    case GgmlType::kQ5_K:
      return DequantQ5_K(src, dst, nblocks);
    case GgmlType::kQ6_K:
      return DequantQ6_K(src, dst, nblocks);
    default:
      break;
  }
  throw Error(detail::Concat("DequantizeRow: no kernel for ", t->name));
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    const float mag = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return BitsFloat(FloatBits(mag) | sign);
  }
  if (exp == 31) return BitsFloat(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t bits = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {  // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7E00 | ((abs >> 13) & 0x3FF));
  }
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00);  // >= 65520 rounds to inf
  const uint32_t e = abs >> 23;                                         // biased float exponent
  if (e <= 112) {
    // Half subnormal (or zero): value in units of 2^-24 is m * 2^(e - 126).
    const uint32_t shift = 126 - e;
    if (shift > 24) return sign;  // below half of 2^-24 (incl. float subnormals): zero
    const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | q);
  }
  const uint32_t mant = abs & 0x7FFFFFu;
  uint32_t h = ((e - 112) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // carry into the exponent is correct
  return static_cast<uint16_t>(sign | h);
}

float BF16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBF16(float f) {
  const uint32_t bits = FloatBits(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1);
  return static_cast<uint16_t>(rounded >> 16);
}

}  // namespace sift
