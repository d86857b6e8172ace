// Tests for sift/gguf.h on files written by tests/support/gguf_writer.h: metadata of every value
// type, tensors and alignment, and corrupt inputs (each must throw sift::Error naming the file,
// never crash or read out of bounds).
#include "sift/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "sift/error.h"
#include "support/gguf_writer.h"
#include "support/temp_dir.h"

namespace sift {
namespace {

using ::sift::testing::GgufWriter;
using ::sift::testing::TempDir;

constexpr uint32_t kF32 = static_cast<uint32_t>(GgmlType::kF32);
constexpr uint32_t kF16 = static_cast<uint32_t>(GgmlType::kF16);
constexpr uint32_t kQ8_0 = static_cast<uint32_t>(GgmlType::kQ8_0);
constexpr uint32_t kQ4_1 = static_cast<uint32_t>(GgmlType::kQ4_1);

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

std::vector<uint8_t> FloatBytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Opens `w` written to a temp file and returns the error message; fails the test if no error.
std::string OpenError(const TempDir& dir, const std::vector<uint8_t>& bytes,
                      const std::string& name = "bad.gguf") {
  const std::string path = dir.File(name);
  GgufWriter::WriteFile(path, bytes);
  try {
    GgufFile::Open(path);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path, 0), 0u) << "message does not start with the path: " << msg;
    return msg;
  }
  ADD_FAILURE() << "Open did not throw";
  return "";
}

void ExpectContains(const std::string& haystack, const std::string& needle) {
  EXPECT_NE(haystack.find(needle), std::string::npos) << "'" << needle << "' not in: " << haystack;
}

// A writer with one key of every value type and a few tensors.
GgufWriter EveryTypeWriter() {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddU8("t.u8", 200);
  w.AddI8("t.i8", -100);
  w.AddU16("t.u16", 60000);
  w.AddI16("t.i16", -30000);
  w.AddU32("t.u32", 4000000000u);
  w.AddI32("t.i32", -2000000000);
  w.AddF32("t.f32", 0.5f);
  w.AddBool("t.bool_true", true);
  w.AddBool("t.bool_false", false);
  w.AddString("t.string", "h\xC3\xA9llo \"world\"\n");
  w.AddString("t.empty_string", "");
  w.AddU64("t.u64", 18000000000000000000ull);
  w.AddI64("t.i64", -9000000000000000000ll);
  w.AddF64("t.f64", 1e-300);
  w.AddArray<uint8_t>("a.u8", testing::kGgufU8, {0, 1, 255});
  w.AddArray<int8_t>("a.i8", testing::kGgufI8, {-128, 0, 127});
  w.AddArray<uint16_t>("a.u16", testing::kGgufU16, {65535, 2});
  w.AddArray<int16_t>("a.i16", testing::kGgufI16, {-32768, 32767});
  w.AddArray<uint32_t>("a.u32", testing::kGgufU32, {1, 4294967295u});
  w.AddArray<int32_t>("a.i32", testing::kGgufI32, {1, -1, 3, 6});
  w.AddArray<float>("a.f32", testing::kGgufF32, {1.5f, -2.25f});
  w.AddArray<uint8_t>("a.bool", testing::kGgufBool, {1, 0, 1});
  w.AddArray<uint64_t>("a.u64", testing::kGgufU64, {7, 18446744073709551615ull});
  w.AddArray<int64_t>("a.i64", testing::kGgufI64, {-5, 5});
  w.AddArray<double>("a.f64", testing::kGgufF64, {0.125, 1e10});
  w.AddStringArray("a.string", {"a", "", "b c", "\xE2\x96\x81x"});
  w.AddArray<int32_t>("a.empty", testing::kGgufI32, {});
  return w;
}

TEST(GgufTest, RoundTripsEveryMetadataType) {
  TempDir dir;
  const std::string path = dir.File("meta.gguf");
  EveryTypeWriter().Write(path);
  auto f = GgufFile::Open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->metadata().size(), 28u);
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->metadata()[0].key, "general.architecture");  // insertion order kept

  struct Scalar {
    const char* key;
    GgufValueType type;
  };
  for (const Scalar& s : {Scalar{"t.u8", GgufValueType::kUint8},
                          {"t.i8", GgufValueType::kInt8},
                          {"t.u16", GgufValueType::kUint16},
                          {"t.i16", GgufValueType::kInt16},
                          {"t.u32", GgufValueType::kUint32},
                          {"t.i32", GgufValueType::kInt32},
                          {"t.f32", GgufValueType::kFloat32},
                          {"t.bool_true", GgufValueType::kBool},
                          {"t.string", GgufValueType::kString},
                          {"t.u64", GgufValueType::kUint64},
                          {"t.i64", GgufValueType::kInt64},
                          {"t.f64", GgufValueType::kFloat64}}) {
    ASSERT_NE(f->Find(s.key), nullptr) << s.key;
    EXPECT_EQ(f->Find(s.key)->type(), s.type) << s.key;
  }
  EXPECT_EQ(f->GetInt("t.u8"), 200);
  EXPECT_EQ(f->GetInt("t.i8"), -100);
  EXPECT_EQ(f->GetInt("t.u16"), 60000);
  EXPECT_EQ(f->GetInt("t.i16"), -30000);
  EXPECT_EQ(f->GetInt("t.u32"), 4000000000ll);
  EXPECT_EQ(f->GetInt("t.i32"), -2000000000);
  EXPECT_EQ(f->GetFloat("t.f32"), 0.5);
  EXPECT_TRUE(f->GetBool("t.bool_true", false));
  EXPECT_FALSE(f->GetBool("t.bool_false", true));
  EXPECT_EQ(f->GetString("t.string"), "h\xC3\xA9llo \"world\"\n");
  EXPECT_EQ(f->GetString("t.empty_string"), "");
  EXPECT_EQ(f->Find("t.u64")->AsUint(), 18000000000000000000ull);
  EXPECT_EQ(f->GetInt("t.i64"), -9000000000000000000ll);
  EXPECT_EQ(f->GetFloat("t.f64"), 1e-300);
  EXPECT_EQ(f->GetFloat("t.u32"), 4e9);  // floats accept integers

  EXPECT_EQ(f->Find("a.u8")->AsIntArray(), (std::vector<int64_t>{0, 1, 255}));
  EXPECT_EQ(f->Find("a.i8")->AsIntArray(), (std::vector<int64_t>{-128, 0, 127}));
  EXPECT_EQ(f->Find("a.u16")->AsIntArray(), (std::vector<int64_t>{65535, 2}));
  EXPECT_EQ(f->Find("a.i16")->AsIntArray(), (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(f->Find("a.u32")->AsIntArray(), (std::vector<int64_t>{1, 4294967295ll}));
  EXPECT_EQ(f->Find("a.i32")->AsIntArray(), (std::vector<int64_t>{1, -1, 3, 6}));
  EXPECT_EQ(f->Find("a.i32")->array_type(), GgufValueType::kInt32);
  EXPECT_EQ(f->Find("a.i32")->array_size(), 4u);
  EXPECT_EQ(f->Find("a.f32")->AsFloatArray(), (std::vector<double>{1.5, -2.25}));
  EXPECT_EQ(f->Find("a.i64")->AsIntArray(), (std::vector<int64_t>{-5, 5}));
  EXPECT_EQ(f->Find("a.i64")->AsFloatArray(), (std::vector<double>{-5, 5}));
  EXPECT_EQ(f->Find("a.f64")->AsFloatArray(), (std::vector<double>{0.125, 1e10}));
  EXPECT_EQ(f->Find("a.bool")->array_type(), GgufValueType::kBool);
  EXPECT_EQ(f->Find("a.bool")->array_size(), 3u);
  EXPECT_EQ(f->Find("a.string")->AsStringArray(),
            (std::vector<std::string_view>{"a", "", "b c", "\xE2\x96\x81x"}));
  EXPECT_TRUE(f->Find("a.empty")->AsIntArray().empty());
  // u64 element beyond int64: AsIntArray refuses, AsFloatArray converts.
  EXPECT_THROW(f->Find("a.u64")->AsIntArray(), Error);
  EXPECT_EQ(f->Find("a.u64")->AsFloatArray()[0], 7.0);
}

TEST(GgufTest, ToStringRendersValues) {
  TempDir dir;
  const std::string path = dir.File("meta.gguf");
  EveryTypeWriter().Write(path);
  auto f = GgufFile::Open(path);
  EXPECT_EQ(f->Find("t.i32")->ToString(), "-2000000000");
  EXPECT_EQ(f->Find("t.bool_true")->ToString(), "true");
  EXPECT_EQ(f->Find("t.f32")->ToString(), "0.5");
  EXPECT_EQ(f->Find("t.string")->ToString(), "\"h\xC3\xA9llo \\\"world\\\"\\n\"");
  EXPECT_EQ(f->Find("a.i32")->ToString(2), "INT32[4] [1, -1, ...]");
  EXPECT_EQ(f->Find("a.string")->ToString(), "STRING[4] [\"a\", \"\", \"b c\", \"\xE2\x96\x81x\"]");
  EXPECT_EQ(f->Find("a.empty")->ToString(), "INT32[0] []");
  EXPECT_STREQ(GgufValueTypeName(GgufValueType::kFloat64), "FLOAT64");
}

TEST(GgufTest, GettersCheckTypesAndNameTheKey) {
  TempDir dir;
  const std::string path = dir.File("meta.gguf");
  EveryTypeWriter().Write(path);
  auto f = GgufFile::Open(path);
  auto error_of = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  std::string msg = error_of([&] { f->GetString("t.u32"); });
  ExpectContains(msg, path);
  ExpectContains(msg, "t.u32");
  msg = error_of([&] { f->GetInt("no.such.key"); });
  ExpectContains(msg, "missing metadata key 'no.such.key'");
  ExpectContains(error_of([&] { f->GetInt("t.u64"); }), "does not fit");
  ExpectContains(error_of([&] { f->Find("t.i8")->AsUint(); }), "negative");
  ExpectContains(error_of([&] { f->GetInt("t.f32"); }), "not an integer");
  ExpectContains(error_of([&] { f->GetInt("t.bool_true"); }), "not an integer");
  ExpectContains(error_of([&] { f->GetBool("t.u8", false); }), "t.u8");
  ExpectContains(error_of([&] { f->GetInt("a.i32"); }), "not a scalar");
  ExpectContains(error_of([&] { f->Find("t.i32")->AsIntArray(); }), "not an array");
  ExpectContains(error_of([&] { f->Find("a.f32")->AsIntArray(); }), "not an array of integers");
  ExpectContains(error_of([&] { f->Find("a.i32")->AsStringArray(); }), "STRING");
  ExpectContains(error_of([&] { f->GetFloat("t.string"); }), "not numeric");

  // Fallbacks apply only to absent keys; a present key of the wrong type still throws.
  EXPECT_EQ(f->GetString("absent", "dflt"), "dflt");
  EXPECT_EQ(f->GetInt("absent", 7), 7);
  EXPECT_EQ(f->GetFloat("absent", 2.5), 2.5);
  EXPECT_TRUE(f->GetBool("absent", true));
  EXPECT_THROW(f->GetInt("t.string", 7), Error);
  EXPECT_FALSE(f->Has("absent"));
  EXPECT_TRUE(f->Has("t.u8"));
}

GgufWriter TensorWriter() {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddTensor("a.f32", kF32, {3, 2}, FloatBytes({1, 2, 3, 4, 5, 6}));  // 24 bytes, padded
  w.AddTensor("b.q8_0", kQ8_0, {64, 2}, Pattern(4 * 34, 1));
  w.AddTensor("c.f16", kF16, {5}, Pattern(10, 2));
  w.AddTensor("d.q4_1", kQ4_1, {32, 1, 2, 1}, Pattern(40, 3));
  return w;
}

void CheckTensorTable(const GgufFile& f, const GgufWriter& w, uint64_t alignment) {
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  ASSERT_EQ(f.tensors().size(), 4u);
  const GgufTensorInfo* a = f.FindTensor("a.f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, GgmlType::kF32);
  EXPECT_EQ(a->ne, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(a->torch_shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->num_elements(), 6);
  EXPECT_EQ(a->nbytes, 24u);
  EXPECT_EQ(a->offset, 0u);
  float values[6];
  std::memcpy(values, a->data, sizeof(values));
  EXPECT_EQ(values[5], 6.0f);

  const GgufTensorInfo* b = f.FindTensor("b.q8_0");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->nbytes, 136u);
  EXPECT_EQ(b->offset, w.TensorOffset(1));
  EXPECT_EQ(b->offset % alignment, 0u);
  EXPECT_EQ(std::vector<uint8_t>(b->data, b->data + b->nbytes), Pattern(136, 1));

  const GgufTensorInfo* c = f.FindTensor("c.f16");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->nbytes, 10u);
  EXPECT_EQ(c->offset, w.TensorOffset(2));
  EXPECT_EQ(std::vector<uint8_t>(c->data, c->data + 10), Pattern(10, 2));

  const GgufTensorInfo* d = f.FindTensor("d.q4_1");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->torch_shape(), (std::vector<int64_t>{1, 2, 1, 32}));
  EXPECT_EQ(d->nbytes, 40u);
  EXPECT_EQ(d->data, f.tensors()[3].data);
  EXPECT_EQ(std::vector<uint8_t>(d->data, d->data + 40), Pattern(40, 3));
  EXPECT_EQ(f.FindTensor("absent"), nullptr);
}

TEST(GgufTest, TensorsWithDefaultAlignment) {
  TempDir dir;
  const std::string path = dir.File("t.gguf");
  GgufWriter w = TensorWriter();
  w.Write(path);
  auto f = GgufFile::Open(path);
  CheckTensorTable(*f, w, 32);
  EXPECT_EQ(f->tensors()[1].offset, 32u);  // 24 bytes padded to 32
  EXPECT_EQ(f->file_size(), w.Build().size());
}

TEST(GgufTest, TensorsWithCustomAlignment) {
  for (uint64_t alignment : {8u, 64u, 256u}) {
    SCOPED_TRACE(alignment);
    TempDir dir;
    const std::string path = dir.File("t.gguf");
    GgufWriter w = TensorWriter();
    w.alignment = alignment;
    w.AddU32("general.alignment", static_cast<uint32_t>(alignment));
    w.Write(path);
    auto f = GgufFile::Open(path);
    CheckTensorTable(*f, w, alignment);
  }
}

TEST(GgufTest, Version2IsAccepted) {
  TempDir dir;
  const std::string path = dir.File("v2.gguf");
  GgufWriter w = TensorWriter();
  w.version = 2;
  w.Write(path);
  auto f = GgufFile::Open(path);
  EXPECT_EQ(f->version(), 2u);
  CheckTensorTable(*f, w, 32);
}

TEST(GgufTest, ZeroTensorsAndEmptyMetadata) {
  TempDir dir;
  const std::string path = dir.File("empty.gguf");
  GgufWriter().Write(path);
  auto f = GgufFile::Open(path);
  EXPECT_TRUE(f->metadata().empty());
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->file_size(), 24u);
}

TEST(GgufTest, RejectsBadAlignment) {
  TempDir dir;
  for (uint32_t alignment : {0u, 3u, 48u}) {
    GgufWriter w = TensorWriter();
    w.AddU32("general.alignment", alignment);
    ExpectContains(OpenError(dir, w.Build()), "general.alignment");
  }
  GgufWriter w = TensorWriter();
  w.AddString("general.alignment", "32");
  ExpectContains(OpenError(dir, w.Build()), "general.alignment");
}

TEST(GgufTest, RejectsBadMagicAndVersion) {
  TempDir dir;
  GgufWriter w = TensorWriter();
  w.magic = 0x46554746;  // "FGUF"
  ExpectContains(OpenError(dir, w.Build()), "bad magic");
  w = TensorWriter();
  w.version = 1;
  ExpectContains(OpenError(dir, w.Build()), "version 1 is not supported");
  w.version = 4;
  ExpectContains(OpenError(dir, w.Build()), "unsupported GGUF version 4");
  w.version = 0x03000000;  // a big-endian v3 file
  ExpectContains(OpenError(dir, w.Build()), "unsupported GGUF version");
}

TEST(GgufTest, EveryTruncationThrows) {
  TempDir dir;
  GgufWriter w = EveryTypeWriter();
  w.AddTensor("a.f32", kF32, {3, 2}, FloatBytes({1, 2, 3, 4, 5, 6}));
  w.AddTensor("b.q8_0", kQ8_0, {64, 2}, Pattern(4 * 34, 1));
  w.AddTensor("c.f32", kF32, {8}, Pattern(32, 9));  // ends exactly at an alignment boundary
  const std::vector<uint8_t> full = w.Build();
  {
    const std::string path = dir.File("full.gguf");
    GgufWriter::WriteFile(path, full);
    ASSERT_NO_THROW(GgufFile::Open(path));
  }
  const std::string path = dir.File("cut.gguf");
  for (size_t cut = 0; cut < full.size(); ++cut) {
    SCOPED_TRACE(cut);
    GgufWriter::WriteFile(path, std::vector<uint8_t>(full.begin(), full.begin() + cut));
    try {
      GgufFile::Open(path);
      ADD_FAILURE() << "no error for a file cut at " << cut << " of " << full.size();
    } catch (const Error& e) {
      const std::string msg = e.what();
      ASSERT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
      ASSERT_NE(msg.find("truncated"), std::string::npos) << msg;
    }
  }
}

// Random byte corruption: Open either succeeds (and then every value and tensor can be read) or
// throws sift::Error. Run under -DSIFT_SANITIZE=ON to catch out-of-bounds reads.
TEST(GgufTest, RandomCorruptionThrowsOrReadsSafely) {
  TempDir dir;
  GgufWriter w = EveryTypeWriter();
  w.AddTensor("a.f32", kF32, {3, 2}, FloatBytes({1, 2, 3, 4, 5, 6}));
  w.AddTensor("b.q8_0", kQ8_0, {64, 2}, Pattern(4 * 34, 1));
  const std::vector<uint8_t> full = w.Build();
  const std::string path = dir.File("fuzz.gguf");
  std::mt19937 rng(1234);
  int opened = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    std::vector<uint8_t> bytes = full;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    }
    GgufWriter::WriteFile(path, bytes);
    std::unique_ptr<GgufFile> f;
    try {
      f = GgufFile::Open(path);
    } catch (const Error&) {
      continue;
    }
    ++opened;
    for (const GgufKeyValue& kv : f->metadata()) {
      (void)kv.value.ToString(1000);
      if (kv.value.type() == GgufValueType::kArray &&
          kv.value.array_type() == GgufValueType::kString) {
        (void)kv.value.AsStringArray();
      }
    }
    for (const GgufTensorInfo& t : f->tensors()) {
      ASSERT_LE(t.offset + t.nbytes, f->file_size() - f->data_offset()) << t.name;
      unsigned sum = 0;  // touch every byte: a pointer past the mapping would fault here
      for (uint64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
      (void)sum;
    }
  }
  EXPECT_GT(opened, 0);
}

TEST(GgufTest, TruncationMessageSaysWhereAndWhat) {
  TempDir dir;
  GgufWriter w;
  w.AddString("general.name", "abcdefgh");
  std::vector<uint8_t> bytes = w.Build();
  bytes.resize(bytes.size() - 3);  // cut inside the string value
  const std::string msg = OpenError(dir, bytes);
  ExpectContains(msg, "truncated: need 8 bytes at offset 56");
  ExpectContains(msg, "metadata key 'general.name'");
  ExpectContains(msg, "the file is 61 bytes");
}

TEST(GgufTest, RejectsTensorOutOfRange) {
  TempDir dir;
  GgufWriter w = TensorWriter();
  w.SetTensorOffset(2, 1 << 20);
  std::string msg = OpenError(dir, w.Build());
  ExpectContains(msg, "tensor 'c.f16'");
  ExpectContains(msg, "past the end of the file");

  w = TensorWriter();
  w.SetTensorOffset(3, std::numeric_limits<uint64_t>::max() - 31);  // offset + size overflows
  ExpectContains(OpenError(dir, w.Build()), "tensor 'd.q4_1'");

  w = TensorWriter();
  w.SetTensorOffset(1, 8);  // not a multiple of 32
  ExpectContains(OpenError(dir, w.Build()), "not a multiple of the alignment 32");
}

TEST(GgufTest, RejectsUnknownTensorType) {
  TempDir dir;
  for (uint32_t type : {99u, 16u, 4u}) {
    GgufWriter w = TensorWriter();
    w.AddTensor("odd", type, {32}, Pattern(32, 0));
    ExpectContains(OpenError(dir, w.Build()),
                   "tensor 'odd' has unknown or unsupported ggml type " + std::to_string(type));
  }
}

TEST(GgufTest, RejectsBadTensorShapes) {
  TempDir dir;
  GgufWriter w;
  w.AddTensor("q", kQ4_1, {40, 2}, Pattern(80, 0));
  ExpectContains(OpenError(dir, w.Build()), "ne[0] = 40, not a multiple of the Q4_1 block size 32");
  w = GgufWriter();
  w.AddTensor("five", kF32, {1, 1, 1, 1, 1}, Pattern(4, 0));
  ExpectContains(OpenError(dir, w.Build()), "tensor 'five' has 5 dimensions");
  w = GgufWriter();
  w.AddTensor("neg", kF32, {4, -1}, Pattern(16, 0));
  ExpectContains(OpenError(dir, w.Build()), "negative dimension");
  w = GgufWriter();
  w.AddTensor("huge", kF32, {1ll << 40, 1ll << 40}, Pattern(16, 0));
  ExpectContains(OpenError(dir, w.Build()), "tensor 'huge'");
}

TEST(GgufTest, RejectsNestedArray) {
  TempDir dir;
  GgufWriter w;
  testing::ByteBuffer b;
  b.Put<uint32_t>(testing::kGgufArray);  // element type ARRAY
  b.Put<uint64_t>(1);
  b.Put<uint32_t>(testing::kGgufU8);
  b.Put<uint64_t>(1);
  b.Put<uint8_t>(5);
  w.AddRaw("nested", testing::kGgufArray, b.bytes());
  ExpectContains(OpenError(dir, w.Build()), "metadata key 'nested' is a nested array");
}

TEST(GgufTest, RejectsDuplicates) {
  TempDir dir;
  GgufWriter w = TensorWriter();
  w.AddU32("dup.key", 1);
  w.AddU32("dup.key", 2);
  ExpectContains(OpenError(dir, w.Build()), "duplicate metadata key 'dup.key'");
  w = TensorWriter();
  w.AddTensor("a.f32", kF32, {8}, Pattern(32, 0));
  ExpectContains(OpenError(dir, w.Build()), "duplicate tensor name 'a.f32'");
}

TEST(GgufTest, RejectsBadValues) {
  TempDir dir;
  GgufWriter w;
  w.AddRaw("weird", 13, {0, 0, 0, 0});
  ExpectContains(OpenError(dir, w.Build()), "metadata key 'weird' has unknown value type 13");
  w = GgufWriter();
  w.AddRaw("b", testing::kGgufBool, {2});
  ExpectContains(OpenError(dir, w.Build()), "invalid byte 2");
  w = GgufWriter();
  w.AddArray<uint8_t>("bools", testing::kGgufBool, {0, 1, 7});
  ExpectContains(OpenError(dir, w.Build()), "element 2 of metadata key 'bools'");
  w = GgufWriter();
  w.AddArray<uint8_t>("arr", 42, {});
  ExpectContains(OpenError(dir, w.Build()), "array of unknown value type 42");
}

TEST(GgufTest, RejectsAbsurdCounts) {
  TempDir dir;
  GgufWriter w = TensorWriter();
  w.n_kv_override = 1ull << 60;
  ExpectContains(OpenError(dir, w.Build()), "truncated or corrupt header");
  w = TensorWriter();
  w.n_tensors_override = std::numeric_limits<uint64_t>::max();
  ExpectContains(OpenError(dir, w.Build()), "truncated or corrupt header");
  w = GgufWriter();
  testing::ByteBuffer b;
  b.Put<uint32_t>(testing::kGgufString);
  b.Put<uint64_t>(1ull << 62);  // element count
  w.AddRaw("tokens", testing::kGgufArray, b.bytes());
  ExpectContains(OpenError(dir, w.Build()), "metadata key 'tokens' claims");
  w = GgufWriter();
  b = testing::ByteBuffer();
  b.Put<uint64_t>(std::numeric_limits<uint64_t>::max());  // string length
  w.AddRaw("s", testing::kGgufString, b.bytes());
  ExpectContains(OpenError(dir, w.Build()), "truncated");
}

TEST(GgufTest, RejectsMissingAndNonRegularFiles) {
  TempDir dir;
  try {
    GgufFile::Open(dir.File("nope.gguf"));
    FAIL() << "no error";
  } catch (const Error& e) {
    ExpectContains(e.what(), dir.File("nope.gguf") + ": cannot open");
  }
  try {
    GgufFile::Open(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    ExpectContains(e.what(), "not a regular file");
  }
  ExpectContains(OpenError(dir, {}), "truncated: need 4 bytes at offset 0 for the magic");
}

}  // namespace
}  // namespace sift
