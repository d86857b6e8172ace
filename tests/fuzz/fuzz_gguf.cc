// libFuzzer target: the GGUF reader (plugin_api gguf.h) on arbitrary bytes, every accessor on
// what it accepted, and the tokenizer built from its metadata (TokenizerSpec::FromGguf,
// Tokenizer::FromGguf), which then encodes and decodes a fixed text.
//
// Input: the bytes of a GGUF file (written to an in-memory file and opened by path, as siftd
// opens a model). Expected: a GgufFile or a sift::Error, nothing else.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "sift/error.h"
#include "sift/gguf.h"
#include "sift/tokenizer.h"

namespace {

int Memfd() {
  static const int fd = ::memfd_create("fuzz_gguf", MFD_CLOEXEC);
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = Memfd();
  if (fd < 0 || ::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
    return 0;
  }
  std::unique_ptr<sift::GgufFile> file;
  try {
    file = sift::GgufFile::Open("/proc/self/fd/" + std::to_string(fd));
  } catch (const sift::Error&) {
    return 0;
  }
  // Every accessor that fits the value's type (a mismatch is one sift::Error per value).
  using T = sift::GgufValueType;
  for (const sift::GgufKeyValue& kv : file->metadata()) {
    const sift::GgufValue& v = kv.value;
    (void)v.ToString();
    try {
      if (v.type() == T::kString) {
        (void)v.AsString();
      } else if (v.type() == T::kArray && v.array_type() == T::kString) {
        (void)v.AsStringArray();
      } else if (v.type() == T::kArray) {
        (void)v.AsIntArray();
        (void)v.AsFloatArray();
      } else if (v.type() == T::kBool) {
        (void)v.AsBool();
      } else {
        (void)v.AsInt();
        (void)v.AsFloat();
      }
    } catch (const sift::Error&) {
    }
    (void)file->Find(kv.key);
  }
  for (const sift::GgufTensorInfo& t : file->tensors()) {
    (void)t.num_elements();
    (void)t.torch_shape();
    if (t.nbytes > 0 && t.data[t.nbytes - 1] == 0xAB) (void)file->FindTensor(t.name);
  }
  try {
    auto tokenizer = sift::Tokenizer::FromGguf(*file);
    const std::string text = "Hello, world! <|im_start|>user\n caf\xc3\xa9 123";
    const std::vector<sift::TokenId> ids = tokenizer->Encode(text, true);
    (void)tokenizer->Decode(ids, false);
    (void)tokenizer->eog_ids();
  } catch (const sift::Error&) {
  }
  return 0;
}
