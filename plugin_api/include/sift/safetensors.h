// Read-only views of Hugging Face checkpoints: .safetensors files (memory-mapped) and checkpoint
// directories (config.json + model.safetensors, or model.safetensors.index.json + shards).
//
// safetensors layout: uint64 LE header length N, N bytes of JSON
//   {"<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>", ...}}   (optional)
// then the data section; offsets are relative to its start (byte 8 + N).
//
// OWNERSHIP: a SafetensorsFile owns its mapping; an HfCheckpoint owns its shards. Every pointer
//            handed out (tensor data, SafetensorsTensor*) is valid until the owner is destroyed.
// THREADING: immutable after Open; safe to read from many threads.
// ERRORS:    Open throws sift::Error starting with the file or directory path and saying what is
//            wrong (truncated, invalid JSON header, unknown dtype, offsets out of range or not
//            matching the shape, missing shard or tensor, ...).
#ifndef SIFT_SAFETENSORS_H_
#define SIFT_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sift {

class MappedFile;

enum class SafetensorsDtype {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};

// The header spelling ("BF16", "F8_E4M3", ...) and the element size in bytes.
const char* SafetensorsDtypeName(SafetensorsDtype dtype);
int64_t SafetensorsDtypeSize(SafetensorsDtype dtype);

struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;  // PyTorch order, row-major
  uint64_t begin = 0;          // data_offsets, relative to the data section
  uint64_t end = 0;
  const uint8_t* data = nullptr;  // into the mapping; not aligned to anything in particular

  uint64_t nbytes() const { return end - begin; }
  int64_t num_elements() const;
};

class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }  // 8 + header length
  // Sorted by data offset.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(std::string_view name) const;  // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile();
  void Parse();

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face model directory. Open reads config.json's location (not its contents, see
// ModelConfig::FromHfConfigJson), and maps model.safetensors if present, otherwise every shard
// named by model.safetensors.index.json's "weight_map" (each tensor must be in its shard).
class HfCheckpoint {
 public:
  static std::unique_ptr<HfCheckpoint> Open(const std::string& dir);
  ~HfCheckpoint();
  HfCheckpoint(const HfCheckpoint&) = delete;
  HfCheckpoint& operator=(const HfCheckpoint&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& config_path() const { return config_path_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
  // Every tensor name, sorted.
  std::vector<std::string> TensorNames() const;
  const SafetensorsTensor* Find(std::string_view name) const;  // nullptr if absent
  // Throws sift::Error naming the directory and the tensor if absent.
  const SafetensorsTensor& Get(std::string_view name) const;
  // The shard file that holds a tensor (for error messages). REQUIRES: Find(name) != nullptr.
  const std::string& ShardPathOf(std::string_view name) const;

 private:
  HfCheckpoint();
  struct Entry {
    const SafetensorsTensor* tensor;
    const SafetensorsFile* shard;
  };

  std::string dir_;
  std::string config_path_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, Entry, std::less<>> index_;
};

}  // namespace sift

#endif  // SIFT_SAFETENSORS_H_
