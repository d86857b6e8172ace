// MappedFile: a whole file mapped read-only into memory (POSIX mmap). Internal to sift_base.
//
// OWNERSHIP: owns the mapping; data() is valid until the MappedFile is destroyed. Move-only.
// THREADING: immutable after Open; safe to read from many threads.
// ERRORS:    Open throws sift::Error starting with the path (cannot open, not a regular file,
//            mmap failure with errno text). An empty file maps to data() == nullptr, size() == 0.
#ifndef SIFT_BASE_MAPPED_FILE_H_
#define SIFT_BASE_MAPPED_FILE_H_

#include <cstdint>
#include <string>

namespace sift {

class MappedFile {
 public:
  static MappedFile Open(const std::string& path);
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  void Reset();
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace sift

#endif  // SIFT_BASE_MAPPED_FILE_H_
