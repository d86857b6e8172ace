#include "daemon/plugin_loader.h"

#include <dlfcn.h>
#include <elf.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "sift/error.h"
#include "sift/plugin.h"

namespace sift::daemon {
namespace {

namespace fs = std::filesystem;

// dlopen handles are never closed (see UNLOAD POLICY in the header): a Plugin holds this
// no-op owner only so that it can say which library it came from.
std::shared_ptr<void> Retain(void* handle) {
  return std::shared_ptr<void>(handle, [](void*) {});
}

// dlerror()'s text for the last failure: the loader's own words ("invalid ELF header", "file
// too short", "undefined symbol: ..."), never a guessed errno.
std::string DlError() {
  const char* e = ::dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SIFT_CHECK(in, "cannot read ", path, ": ", std::strerror(errno));
  std::ostringstream os;
  os << in.rdbuf();
  SIFT_CHECK(!in.bad(), "cannot read ", path);
  return os.str();
}

std::string Fnv1a64Hex(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

bool ValidName(const char* s) {
  if (s == nullptr || *s == '\0') return false;
  for (; *s; ++s) {
    const char c = *s;
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// Checks a descriptor whose ABI version already matched. Returns "" or the problem.
std::string CheckDescriptor(const sift_plugin_descriptor& d) {
  if (!ValidName(d.name)) return "descriptor name must be [a-z0-9_]+";
  if (d.version == nullptr || *d.version == '\0') return "descriptor has no version";
  if (d.kind < static_cast<int>(StageKind::kPrefill) ||
      d.kind > static_cast<int>(StageKind::kDecode)) {
    return "descriptor kind " + std::to_string(d.kind) + " is not a stage kind";
  }
  if (d.sift_abi != SIFT_PLUGIN_ABI_VERSION) {
    return "built against sift ABI " + std::to_string(d.sift_abi) + ", this siftd has " +
           std::to_string(SIFT_PLUGIN_ABI_VERSION) + "; rebuild the plugin against this sift";
  }
  if (d.torch_version == nullptr || std::strcmp(d.torch_version, HostTorchVersion()) != 0) {
    return std::string("built against LibTorch ") + (d.torch_version ? d.torch_version : "(null)") +
           ", this siftd uses " + HostTorchVersion() + "; rebuild the plugin against this sift";
  }
  if (d.cxx_abi == nullptr || std::strcmp(d.cxx_abi, HostCxxAbi()) != 0) {
    return std::string("built with C++ ABI '") + (d.cxx_abi ? d.cxx_abi : "(null)") +
           "', this siftd has '" + HostCxxAbi() + "'; rebuild the plugin against this sift";
  }
  if (d.create == nullptr || d.destroy == nullptr) return "descriptor lacks create or destroy";
  if (d.api_hash == nullptr || std::strcmp(d.api_hash, SIFT_API_HASH) != 0) {
    return std::string("built against sift headers ") + (d.api_hash ? d.api_hash : "(null)") +
           ", this siftd has " + SIFT_API_HASH + "; rebuild the plugin against this sift";
  }
  return "";
}

// A truncated library maps fine and faults (SIGBUS) only when a missing page is touched, maybe
// much later, in a request. So before dlopen: the ELF headers, every loadable segment and the
// section header table must lie inside the file. Returns "" or the problem ("" too for files
// that are not 64-bit ELF at all, which dlopen refuses with its own message).
std::string CheckElfLayout(const std::string& bytes) {
  const uint64_t size = bytes.size();
  Elf64_Ehdr eh;
  if (size < sizeof(eh) || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0 ||
      static_cast<unsigned char>(bytes[EI_CLASS]) != ELFCLASS64) {
    return "";  // not a 64-bit ELF file: dlopen says so in its own words
  }
  std::memcpy(&eh, bytes.data(), sizeof(eh));
  auto inside = [size](uint64_t offset, uint64_t length) {
    return offset <= size && length <= size - offset;
  };
  const std::string sz = std::to_string(size);
  if (eh.e_phentsize != sizeof(Elf64_Phdr) ||
      !inside(eh.e_phoff, uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr))) {
    return "truncated or corrupt: the program headers lie outside the file's " + sz + " bytes";
  }
  for (uint16_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, bytes.data() + eh.e_phoff + i * sizeof(Elf64_Phdr), sizeof(ph));
    if ((ph.p_type == PT_LOAD || ph.p_type == PT_DYNAMIC) && !inside(ph.p_offset, ph.p_filesz)) {
      return "truncated: segment " + std::to_string(i) + " needs bytes up to " +
             std::to_string(ph.p_offset + ph.p_filesz) + " but the file has " + sz;
    }
  }
  if (eh.e_shoff != 0 && !inside(eh.e_shoff, uint64_t{eh.e_shnum} * eh.e_shentsize)) {
    return "truncated: the section headers need bytes up to " +
           std::to_string(eh.e_shoff + uint64_t{eh.e_shnum} * eh.e_shentsize) +
           " but the file has " + sz;
  }
  return "";
}

}  // namespace

const char* HostTorchVersion() { return SIFT_BUILD_TORCH_VERSION; }
const char* HostCxxAbi() { return SIFT_BUILD_CXX_ABI; }

std::string HashBytes(const std::string& bytes) { return Fnv1a64Hex(bytes); }
std::string HashFile(const std::string& path) { return Fnv1a64Hex(ReadFile(path)); }

void StageDeleter::operator()(Stage* stage) const {
  if (stage != nullptr) plugin->descriptor()->destroy(stage);
}

Plugin::Plugin(Info info, std::shared_ptr<void> library, const sift_plugin_descriptor* descriptor)
    : info_(std::move(info)), library_(std::move(library)), descriptor_(descriptor) {}

StageHandle Plugin::CreateStage(const StageParams& params, const Model& model) const {
  char error[4096] = {0};
  Stage* stage = descriptor_->create(&params, &model, error, sizeof(error));
  if (stage == nullptr) {
    throw Error(error[0] ? error : id() + ": the stage factory failed without a message");
  }
  return StageHandle(stage, StageDeleter{shared_from_this()});
}

PluginLoader::PluginLoader(std::string staging_dir) : staging_dir_(std::move(staging_dir)) {
  std::error_code ec;
  fs::create_directories(staging_dir_, ec);
  SIFT_CHECK(!ec, "cannot create the plugin staging folder ", staging_dir_, ": ", ec.message());
}

std::string PluginNameForFile(const std::string& path) { return fs::path(path).stem().string(); }

std::string CheckPluginName(const std::string& source_path, const std::string& declared) {
  if (declared == PluginNameForFile(source_path)) return "";
  return "its descriptor names plugin '" + declared + "' but the file is named " +
         fs::path(source_path).filename().string() +
         "; a plugin named N must be installed as N.so (not loaded; it cannot displace "
         "another file's plugin)";
}

StagedFile PluginLoader::Stage(const std::string& path) const {
  static std::atomic<uint64_t> counter{0};
  StagedFile out;
  out.source = path;
  std::string bytes;
  try {
    bytes = ReadFile(path);
  } catch (const Error& e) {
    out.error = path + ": " + e.what();
    return out;
  }
  out.hash = HashBytes(bytes);
  out.staged = (fs::path(staging_dir_) / (PluginNameForFile(path) + "." + out.hash + "." +
                                          std::to_string(counter++) + ".so"))
                   .string();
  std::ofstream copy(out.staged, std::ios::binary | std::ios::trunc);
  copy.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  copy.close();
  if (!copy) {
    Discard(out);
    out.error = path + ": cannot write the staged copy " + out.staged;
    out.staged.clear();
  }
  return out;
}

void PluginLoader::Discard(const StagedFile& staged) const {
  if (staged.staged.empty()) return;
  std::error_code ec;
  fs::remove(staged.staged, ec);  // a mapped library stays valid after its file is removed
}

LoadOutcome PluginLoader::Load(const std::string& path, const Model* model) const {
  const StagedFile staged = Stage(path);
  if (!staged.error.empty()) return LoadOutcome{nullptr, staged.error};
  return LoadStaged(staged, model);
}

LoadOutcome PluginLoader::LoadStaged(const StagedFile& staged, const Model* model) const {
  LoadOutcome out = Open(staged.staged, staged.source, staged.hash, model);
  if (out.plugin == nullptr) Discard(staged);  // rejected copies do not pile up
  return out;
}

LoadOutcome PluginLoader::Open(const std::string& library_path, const std::string& source_path,
                               const std::string& hash, const Model* model, bool check_name) {
  const std::string& path = source_path;
  LoadOutcome out;
  auto fail = [&](const std::string& why) {
    out.plugin = nullptr;
    out.error = path + ": " + why;
    return out;
  };
  Plugin::Info info;
  info.source_path = source_path;
  info.staged_path = library_path;
  info.content_hash = hash;

  // Its layout first (a truncated file would fault later, not fail now), then load it. The
  // handle is never closed, so nothing the library creates can outlive its code.
  try {
    const std::string layout = CheckElfLayout(ReadFile(library_path));
    if (!layout.empty()) return fail("cannot load: " + layout);
  } catch (const Error& e) {
    return fail(e.what());
  }
  ::dlerror();
  void* handle = ::dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return fail("cannot load: " + DlError());
  std::shared_ptr<void> library = Retain(handle);

  // Entry symbol, ABI version first, then the rest of the descriptor.
  ::dlerror();
  void* symbol = ::dlsym(handle, SIFT_PLUGIN_ENTRY_SYMBOL);
  if (symbol == nullptr) {
    return fail("not a sift plugin: it does not export '" SIFT_PLUGIN_ENTRY_SYMBOL "'");
  }
  using EntryFn = const sift_plugin_descriptor* (*)();
  const sift_plugin_descriptor* d = reinterpret_cast<EntryFn>(symbol)();
  if (d == nullptr) return fail(SIFT_PLUGIN_ENTRY_SYMBOL "() returned NULL");
  if (d->abi_version != SIFT_PLUGIN_ABI_VERSION) {
    return fail("plugin ABI version " + std::to_string(d->abi_version) + ", this siftd expects " +
                std::to_string(SIFT_PLUGIN_ABI_VERSION) + "; rebuild the plugin against this sift");
  }
  const std::string problem = CheckDescriptor(*d);
  if (!problem.empty()) return fail(problem);
  // One file, one name: a file can never take over another file's plugin.
  if (check_name) {
    const std::string mismatch = CheckPluginName(source_path, d->name);
    if (!mismatch.empty()) return fail(mismatch);
  }
  info.name = d->name;
  info.version = d->version;
  info.kind = static_cast<StageKind>(d->kind);
  auto plugin = std::make_shared<Plugin>(std::move(info), library, d);

  // The factory must work with default parameters.
  if (model != nullptr) {
    try {
      plugin->CreateStage(StageParams(path, "(load check)", plugin->name()), *model);
    } catch (const std::exception& e) {
      return fail("plugin " + plugin->id() +
                  ": the stage factory failed with default parameters: " + e.what());
    }
  }
  out.plugin = std::move(plugin);
  return out;
}

}  // namespace sift::daemon
