// The plugin ABI: the one C-linkage symbol every stage plugin (.so) exports.
//
//   extern "C" const sift_plugin_descriptor* sift_plugin_entry(void);
//
// The descriptor starts with the ABI version; the loader checks it before reading anything else,
// then compares the build info (sift ABI, LibTorch version, C++ ABI, digest of the sift headers)
// with its own and refuses any difference. create() and destroy() never let an exception out:
// create() reports failure as a NULL result and a message copied into the caller's buffer.
//
// A plugin declares itself with one macro in its plugin.cc:
//
//   SIFT_PLUGIN("snapkv", "1.0.0", sift::StageKind::kSelect, SnapKvStage)
//
// where SnapKvStage has a constructor (const sift::StageParams&, const sift::Model&). The loader
// creates one stage from empty parameters when it loads the plugin, so every parameter needs a
// default (docs/writing-a-plugin.md).
//
// OWNERSHIP: the descriptor is static in the plugin. A Stage returned by create() is owned by the
//            caller and must be released with the same descriptor's destroy(), while the library
//            is still loaded.
#ifndef SIFT_PLUGIN_H_
#define SIFT_PLUGIN_H_

#include <torch/version.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>

#include "sift/api_hash.h"  // generated: SIFT_API_HASH, digest of every public header
#include "sift/stage.h"

// Bump when anything a plugin compiles against changes shape (Stage, RequestState, Model, ...).
#define SIFT_PLUGIN_ABI_VERSION 3u

#define SIFT_STRINGIFY_IMPL(x) #x
#define SIFT_STRINGIFY(x) SIFT_STRINGIFY_IMPL(x)
// Build info the loader compares exactly.
#define SIFT_BUILD_TORCH_VERSION TORCH_VERSION
#define SIFT_BUILD_CXX_ABI \
  "gcc" SIFT_STRINGIFY(__GNUC__) ";cxx11abi=" SIFT_STRINGIFY(_GLIBCXX_USE_CXX11_ABI)

namespace sift {

// Wraps a stage class so that nothing it throws from Plan or Run leaves the plugin: an escaped
// exception becomes Status(INTERNAL, "stage_exception", what()).
template <typename T>
class ExceptionGuard final : public T {
 public:
  using T::T;
  Status Plan(const Model& model, RequestPlan& plan) const override {
    try {
      return T::Plan(model, plan);
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal, "stage_exception", e.what());
    } catch (...) {
      return Status(StatusCode::kInternal, "stage_exception", "unknown exception in Plan");
    }
  }
  Status Run(const Model& model, RequestState& state, StageContext& context) override {
    try {
      return T::Run(model, state, context);
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal, "stage_exception", e.what());
    } catch (...) {
      return Status(StatusCode::kInternal, "stage_exception", "unknown exception in Run");
    }
  }
};

}  // namespace sift

extern "C" {

struct sift_plugin_descriptor {
  uint32_t abi_version;       // SIFT_PLUGIN_ABI_VERSION; checked first
  const char* name;           // e.g. "snapkv"
  const char* version;        // e.g. "1.0.0"
  int kind;                   // sift::StageKind
  uint32_t sift_abi;          // SIFT_PLUGIN_ABI_VERSION the plugin's headers had
  const char* torch_version;  // SIFT_BUILD_TORCH_VERSION
  const char* cxx_abi;        // SIFT_BUILD_CXX_ABI
  // Creates a stage; on failure returns NULL and writes a NUL-terminated message to error.
  sift::Stage* (*create)(const sift::StageParams* params, const sift::Model* model, char* error,
                         size_t error_size);
  void (*destroy)(sift::Stage* stage);
  const char* api_hash;  // SIFT_API_HASH of the headers the plugin was compiled with
};

typedef const sift_plugin_descriptor* (*sift_plugin_entry_fn)(void);
}

#define SIFT_PLUGIN_ENTRY_SYMBOL "sift_plugin_entry"

#define SIFT_PLUGIN(NAME, VERSION, KIND, STAGE_CLASS)                                      \
  namespace {                                                                              \
  sift::Stage* SiftPluginCreate(const sift::StageParams* params, const sift::Model* model, \
                                char* error, size_t error_size) {                          \
    try {                                                                                  \
      return new sift::ExceptionGuard<STAGE_CLASS>(*params, *model);                       \
    } catch (const std::exception& e) {                                                    \
      std::snprintf(error, error_size, "%s", e.what());                                    \
    } catch (...) {                                                                        \
      std::snprintf(error, error_size, "unknown exception in %s constructor", NAME);       \
    }                                                                                      \
    return nullptr;                                                                        \
  }                                                                                        \
  void SiftPluginDestroy(sift::Stage* stage) { delete stage; }                             \
  const sift_plugin_descriptor kSiftPluginDescriptor = {SIFT_PLUGIN_ABI_VERSION,           \
                                                        NAME,                              \
                                                        VERSION,                           \
                                                        static_cast<int>(KIND),            \
                                                        SIFT_PLUGIN_ABI_VERSION,           \
                                                        SIFT_BUILD_TORCH_VERSION,          \
                                                        SIFT_BUILD_CXX_ABI,                \
                                                        &SiftPluginCreate,                 \
                                                        &SiftPluginDestroy,                \
                                                        SIFT_API_HASH};                    \
  }                                                                                        \
  extern "C" __attribute__((visibility("default"))) const sift_plugin_descriptor*          \
  sift_plugin_entry(void) {                                                                \
    return &kSiftPluginDescriptor;                                                         \
  }

#endif  // SIFT_PLUGIN_H_
