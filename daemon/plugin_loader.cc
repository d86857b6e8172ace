#include "daemon/plugin_loader.h"

#include <atomic>
#include <boost/dll/shared_library.hpp>
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

// Every library ever loaded, never released (see UNLOAD POLICY in the header). Leaked on
// purpose: no dlclose even during static destruction at exit.
void Retain(std::shared_ptr<void> library) {
  static std::mutex* mu = new std::mutex;
  static auto* retained = new std::vector<std::shared_ptr<void>>;
  std::lock_guard<std::mutex> lock(*mu);
  retained->push_back(std::move(library));
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

LoadOutcome PluginLoader::Load(const std::string& path, const Model* model) const {
  static std::atomic<uint64_t> counter{0};
  LoadOutcome out;
  auto fail = [&](const std::string& why) {
    out.plugin = nullptr;
    out.error = path + ": " + why;
    return out;
  };

  // 1. Stage a private copy.
  Plugin::Info info;
  info.source_path = path;
  std::string bytes;
  try {
    bytes = ReadFile(path);
  } catch (const Error& e) {
    return fail(e.what());
  }
  info.content_hash = HashBytes(bytes);
  info.staged_path =
      (fs::path(staging_dir_) / (fs::path(path).stem().string() + "." + info.content_hash + "." +
                                 std::to_string(counter++) + ".so"))
          .string();
  {
    std::ofstream copy(info.staged_path, std::ios::binary | std::ios::trunc);
    copy.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    copy.close();
    if (!copy) return fail("cannot write the staged copy " + info.staged_path);
  }

  // 2. Load it. The library is retained before anything in it runs, so nothing it creates can
  // outlive its code.
  std::shared_ptr<boost::dll::shared_library> library;
  try {
    library = std::make_shared<boost::dll::shared_library>(
        info.staged_path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    return fail(std::string("cannot load: ") + e.what());
  }
  Retain(library);

  // 3. Entry symbol, ABI version first, then the rest of the descriptor.
  if (!library->has(SIFT_PLUGIN_ENTRY_SYMBOL)) {
    return fail("not a sift plugin: it does not export '" SIFT_PLUGIN_ENTRY_SYMBOL "'");
  }
  auto& entry = library->get<const sift_plugin_descriptor*()>(SIFT_PLUGIN_ENTRY_SYMBOL);
  const sift_plugin_descriptor* d = entry();
  if (d == nullptr) return fail(SIFT_PLUGIN_ENTRY_SYMBOL "() returned NULL");
  if (d->abi_version != SIFT_PLUGIN_ABI_VERSION) {
    return fail("plugin ABI version " + std::to_string(d->abi_version) + ", this siftd expects " +
                std::to_string(SIFT_PLUGIN_ABI_VERSION) + "; rebuild the plugin against this sift");
  }
  const std::string problem = CheckDescriptor(*d);
  if (!problem.empty()) return fail(problem);
  info.name = d->name;
  info.version = d->version;
  info.kind = static_cast<StageKind>(d->kind);
  auto plugin = std::make_shared<Plugin>(std::move(info), library, d);

  // 4. The factory must work with default parameters.
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
