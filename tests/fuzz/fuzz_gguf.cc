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
  for (const sift::GgufKeyValue& kv : file->metadata()) {
    const sift::GgufValue& v = kv.value;
    (void)v.ToString();
    try {
      (void)v.AsInt();
    } catch (const sift::Error&) {
    }
    try {
      (void)v.AsFloat();
    } catch (const sift::Error&) {
    }
    try {
      (void)v.AsString();
    } catch (const sift::Error&) {
    }
    try {
      (void)v.AsStringArray();
    } catch (const sift::Error&) {
    }
    try {
      (void)v.AsIntArray();
    } catch (const sift::Error&) {
    }
    try {
      (void)file->GetString(kv.key);
    } catch (const sift::Error&) {
    }
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
