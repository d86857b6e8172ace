// Test-only GGUF writer: builds small GGUF files byte by byte (layout: ggml docs/gguf.md) so tests
// can round-trip metadata and tensors and craft corrupt files. Header-only; not part of the
// library.
//
// Layout written: magic, version, n_tensors, n_kv (uint64), the key/value pairs in insertion
// order, the tensor infos, zero padding to `alignment`, then each tensor's bytes, each padded to
// `alignment`. Offsets are computed unless a tensor sets `offset_override`. Nothing is validated:
// tests deliberately write invalid files.
#ifndef SIFT_TESTS_SUPPORT_GGUF_WRITER_H_
#define SIFT_TESTS_SUPPORT_GGUF_WRITER_H_

#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sift::testing {

// Little-endian byte buffer.
class ByteBuffer {
 public:
  template <typename T>
  void Put(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    bytes_.insert(bytes_.end(), b, b + sizeof(T));
  }
  void PutString(std::string_view s) {
    Put<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void PutBytes(const std::vector<uint8_t>& b) { bytes_.insert(bytes_.end(), b.begin(), b.end()); }
  void PadTo(uint64_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }

 private:
  std::vector<uint8_t> bytes_;
};

// Value type ids as in the GGUF spec (kept separate from sift's enum on purpose).
enum : uint32_t {
  kGgufU8 = 0,
  kGgufI8 = 1,
  kGgufU16 = 2,
  kGgufI16 = 3,
  kGgufU32 = 4,
  kGgufI32 = 5,
  kGgufF32 = 6,
  kGgufBool = 7,
  kGgufString = 8,
  kGgufArray = 9,
  kGgufU64 = 10,
  kGgufI64 = 11,
  kGgufF64 = 12,
};

class GgufWriter {
 public:
  uint32_t magic = 0x46554747;  // "GGUF"
  uint32_t version = 3;
  uint64_t alignment = 32;  // used for the layout; add "general.alignment" yourself to declare it
  std::optional<uint64_t> n_kv_override;
  std::optional<uint64_t> n_tensors_override;

  // Scalars: the caller picks the type id; T must have the encoded width.
  template <typename T>
  void Add(const std::string& key, uint32_t type, T value) {
    ByteBuffer b;
    b.Put<T>(value);
    AddRaw(key, type, b.bytes());
  }
  void AddU8(const std::string& k, uint8_t v) { Add(k, kGgufU8, v); }
  void AddI8(const std::string& k, int8_t v) { Add(k, kGgufI8, v); }
  void AddU16(const std::string& k, uint16_t v) { Add(k, kGgufU16, v); }
  void AddI16(const std::string& k, int16_t v) { Add(k, kGgufI16, v); }
  void AddU32(const std::string& k, uint32_t v) { Add(k, kGgufU32, v); }
  void AddI32(const std::string& k, int32_t v) { Add(k, kGgufI32, v); }
  void AddF32(const std::string& k, float v) { Add(k, kGgufF32, v); }
  void AddU64(const std::string& k, uint64_t v) { Add(k, kGgufU64, v); }
  void AddI64(const std::string& k, int64_t v) { Add(k, kGgufI64, v); }
  void AddF64(const std::string& k, double v) { Add(k, kGgufF64, v); }
  void AddBool(const std::string& k, bool v) { Add(k, kGgufBool, static_cast<uint8_t>(v)); }
  void AddString(const std::string& k, std::string_view v) {
    ByteBuffer b;
    b.PutString(v);
    AddRaw(k, kGgufString, b.bytes());
  }

  // Array of fixed-size elements of type id `elem_type`.
  template <typename T>
  void AddArray(const std::string& key, uint32_t elem_type, const std::vector<T>& values) {
    ByteBuffer b;
    b.Put<uint32_t>(elem_type);
    b.Put<uint64_t>(values.size());
    for (const T& v : values) b.Put<T>(v);
    AddRaw(key, kGgufArray, b.bytes());
  }
  void AddStringArray(const std::string& key, const std::vector<std::string>& values) {
    ByteBuffer b;
    b.Put<uint32_t>(kGgufString);
    b.Put<uint64_t>(values.size());
    for (const std::string& v : values) b.PutString(v);
    AddRaw(key, kGgufArray, b.bytes());
  }

  // Any type id with an already encoded value (for corrupt inputs).
  void AddRaw(const std::string& key, uint32_t type, const std::vector<uint8_t>& encoded) {
    kvs_.push_back({key, type, encoded});
  }

  // A tensor; `data` must already be encoded in `ggml_type` (bytes are not checked).
  size_t AddTensor(const std::string& name, uint32_t ggml_type, const std::vector<int64_t>& ne,
                   const std::vector<uint8_t>& data) {
    tensors_.push_back({name, ggml_type, ne, data, std::nullopt});
    return tensors_.size() - 1;
  }
  void SetTensorOffset(size_t index, uint64_t offset) { tensors_[index].offset_override = offset; }

  // Computed offset of tensor `index` relative to the data section.
  uint64_t TensorOffset(size_t index) const {
    uint64_t offset = 0;
    for (size_t i = 0; i < index; ++i) offset += Padded(tensors_[i].data.size());
    return offset;
  }

  std::vector<uint8_t> Build() const {
    ByteBuffer b;
    b.Put<uint32_t>(magic);
    b.Put<uint32_t>(version);
    b.Put<uint64_t>(n_tensors_override.value_or(tensors_.size()));
    b.Put<uint64_t>(n_kv_override.value_or(kvs_.size()));
    for (const Kv& kv : kvs_) {
      b.PutString(kv.key);
      b.Put<uint32_t>(kv.type);
      b.PutBytes(kv.encoded);
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      b.PutString(t.name);
      b.Put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
      for (int64_t d : t.ne) b.Put<int64_t>(d);
      b.Put<uint32_t>(t.type);
      b.Put<uint64_t>(t.offset_override.value_or(TensorOffset(i)));
    }
    if (!tensors_.empty()) b.PadTo(alignment);
    for (const Tensor& t : tensors_) {
      b.PutBytes(t.data);
      b.PadTo(alignment);
    }
    return b.bytes();
  }

  void Write(const std::string& path) const { WriteFile(path, Build()); }

  static void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + path);
  }

 private:
  struct Kv {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> encoded;
  };
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
    std::optional<uint64_t> offset_override;
  };
  uint64_t Padded(uint64_t n) const { return (n + alignment - 1) / alignment * alignment; }

  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace sift::testing

#endif  // SIFT_TESTS_SUPPORT_GGUF_WRITER_H_
