// Read-only view of a GGUF file (llama.cpp's model container), memory-mapped.
//
// Layout reference: the GGUF spec, docs/gguf.md of ggml
// (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md). GgufFile::Open parses the header,
// every metadata pair and the tensor table, and validates offsets, alignment and sizes against
// the file length; tensor bytes are not copied (GgufTensorInfo::data points into the mapping).
//
// OWNERSHIP: the GgufFile owns the mapping; every pointer and string_view it hands out is valid
//            until the GgufFile is destroyed.
// THREADING: immutable after Open; safe to read from many threads.
// ERRORS:    Open throws sift::Error naming the file and what is wrong (truncated, bad magic,
//            unsupported version, offset out of range, ...). Typed getters throw on a missing key
//            or a type mismatch, naming the key.
#ifndef SIFT_GGUF_H_
#define SIFT_GGUF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sift/ggml_types.h"

namespace sift {

class MappedFile;

// Metadata value types, numbered as in the GGUF spec.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "UINT32", "STRING", ...; "unknown" for a number outside the spec.
const char* GgufValueTypeName(GgufValueType type);

// One metadata value. Scalars are widened on read; arrays keep their element type.
class GgufValue {
 public:
  GgufValueType type() const { return type_; }
  // For arrays: the element type and count. Nested arrays are rejected at parse time.
  GgufValueType array_type() const { return array_type_; }
  size_t array_size() const { return array_size_; }

  // Scalar access; throws sift::Error if the value is not of a compatible kind.
  // Integers convert to each other when the value fits; floats accept any numeric type.
  // Bools and strings convert to nothing else.
  int64_t AsInt() const;
  uint64_t AsUint() const;
  double AsFloat() const;
  bool AsBool() const;
  std::string_view AsString() const;

  // Array access; element conversion rules as for scalars.
  std::vector<std::string_view> AsStringArray() const;
  std::vector<int64_t> AsIntArray() const;
  std::vector<double> AsFloatArray() const;

  // Short human-readable rendering (arrays abbreviated), for `sift-model info`.
  std::string ToString(size_t max_array_items = 8) const;

 private:
  friend class GgufFile;
  GgufValueType type_ = GgufValueType::kUint8;
  GgufValueType array_type_ = GgufValueType::kUint8;
  size_t array_size_ = 0;
  // Points into the mapping: at the encoded scalar (for a string, at its uint64 length), or for
  // an array at its first element (after the element type and count).
  const uint8_t* data_ = nullptr;
  size_t bytes_ = 0;  // encoded size of what data_ points at (all elements, for an array)
};

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // GGUF order: ne[0] is the contiguous dimension
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping

  int64_t num_elements() const;
  // PyTorch shape: ne reversed, e.g. a GGUF [576, 1536] weight is (1536, 576).
  std::vector<int64_t> torch_shape() const;
};

class GgufFile {
 public:
  static std::unique_ptr<GgufFile> Open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }

  const std::vector<GgufKeyValue>& metadata() const { return kv_; }
  const GgufValue* Find(std::string_view key) const;  // nullptr if absent
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Typed getters. The one-argument forms throw if the key is missing.
  std::string GetString(std::string_view key) const;
  std::string GetString(std::string_view key, std::string_view fallback) const;
  int64_t GetInt(std::string_view key) const;
  int64_t GetInt(std::string_view key, int64_t fallback) const;
  double GetFloat(std::string_view key) const;
  double GetFloat(std::string_view key, double fallback) const;
  bool GetBool(std::string_view key, bool fallback) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;  // nullptr if absent
  // Offset of the tensor data section from the start of the file (aligned to alignment()).
  uint64_t data_offset() const { return data_offset_; }

 private:
  class Parser;
  GgufFile();
  // Runs get(value) for the key (which must exist) and prefixes any sift::Error with the path and
  // key. Defined in gguf.cc, its only user.
  template <typename F>
  auto WithKey(std::string_view key, F&& get) const;

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace sift

#endif  // SIFT_GGUF_H_
