#include "spts_proxy.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

#include "sift/error.h"
#include "sift/host.h"

namespace sift::plugins {
namespace {

constexpr char kMagic[8] = {'S', 'I', 'F', 'T', 'S', 'P', 'T', 'S'};
constexpr uint32_t kFormatVersion = 1;
const char* const kNames[] = {"channels", "gate_u", "gate_v", "up_u", "up_v", "down_u", "down_v"};

at::Tensor* Field(SptsLayerProxy& p, const std::string& name) {
  if (name == "channels") return &p.channels;
  if (name == "gate_u") return &p.gate_u;
  if (name == "gate_v") return &p.gate_v;
  if (name == "up_u") return &p.up_u;
  if (name == "up_v") return &p.up_v;
  if (name == "down_u") return &p.down_u;
  if (name == "down_v") return &p.down_v;
  return nullptr;
}

}  // namespace

at::Tensor SptsProxy::Norms(int64_t layer, const at::Tensor& h) const {
  const SptsLayerProxy& p = layers.at(layer);
  SIFT_CHECK(p.gate_u.device() == h.device(), "SPTS proxy: layer ", layer, " is on ",
             p.gate_u.device(), ", the hidden states on ", h.device(),
             " (load it with SptsProxy::LoadShared(path, model device))");
  at::Tensor x = h.to(at::kFloat);
  at::Tensor gate = at::silu(x.matmul(p.gate_u).matmul(p.gate_v));
  at::Tensor up = x.matmul(p.up_u).matmul(p.up_v);
  at::Tensor out = gate.mul_(up).matmul(p.down_v.t()).matmul(p.down_u.t());
  return out.norm(2, {1});
}

SptsProxy SptsProxy::To(const at::Device& device) const {
  SptsProxy out;
  out.header = header;
  out.layers = layers;
  for (SptsLayerProxy& p : out.layers) {
    for (const char* name : kNames) {
      at::Tensor* t = Field(p, name);
      *t = t->to(device);
    }
  }
  return out;
}

void SptsProxy::Save(const std::string& path) const {
  nlohmann::json h = header;
  h["format"] = "sift-spts-proxy";
  h["format_version"] = kFormatVersion;
  h["d_low"] = d_low();
  h["rank"] = rank();
  h["num_layers"] = layers.size();
  nlohmann::json tensors = nlohmann::json::array();
  std::vector<at::Tensor> order;
  for (size_t l = 0; l < layers.size(); ++l) {
    SptsLayerProxy copy = layers[l];
    for (const char* name : kNames) {
      at::Tensor t = *Field(copy, name);
      SIFT_CHECK(t.defined(), "proxy layer ", l, ": tensor ", name, " is missing");
      const bool ints = std::strcmp(name, "channels") == 0;
      t = t.to(ints ? at::kLong : at::kFloat).contiguous();
      tensors.push_back({{"name", name},
                         {"layer", l},
                         {"dtype", ints ? "i64" : "f32"},
                         {"shape", t.sizes().vec()}});
      order.push_back(t);
    }
  }
  h["tensors"] = tensors;
  const std::string text = h.dump();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SIFT_CHECK(out.good(), "cannot write the SPTS proxy file ", path);
  out.write(kMagic, sizeof(kMagic));
  const uint32_t version = kFormatVersion, length = static_cast<uint32_t>(text.size());
  out.write(reinterpret_cast<const char*>(&version), sizeof(version));
  out.write(reinterpret_cast<const char*>(&length), sizeof(length));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const at::Tensor& t : order) {
    const at::Tensor h = ToHost(t);
    out.write(static_cast<const char*>(h.data_ptr()),  // host: ToHost'd
              static_cast<std::streamsize>(h.nbytes()));
  }
  out.close();
  SIFT_CHECK(out.good(), "error while writing the SPTS proxy file ", path);
}

SptsProxy SptsProxy::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SIFT_CHECK(in.good(), "cannot open the SPTS proxy file ", path,
             " (generate it with sift-spts-calibrate, docs/methods/spts.md)");
  char magic[8];
  uint32_t version = 0, length = 0;
  in.read(magic, sizeof(magic));
  in.read(reinterpret_cast<char*>(&version), sizeof(version));
  in.read(reinterpret_cast<char*>(&length), sizeof(length));
  SIFT_CHECK(in.good() && std::memcmp(magic, kMagic, sizeof(kMagic)) == 0, path,
             ": not an SPTS proxy file");
  SIFT_CHECK(version == kFormatVersion, path, ": proxy format version ", version,
             ", this build reads ", kFormatVersion);
  std::string text(length, '\0');
  in.read(text.data(), length);
  SIFT_CHECK(in.good(), path, ": truncated header");
  SptsProxy proxy;
  proxy.header = nlohmann::json::parse(text, nullptr, false);
  SIFT_CHECK(!proxy.header.is_discarded() && proxy.header.contains("tensors"), path,
             ": malformed header");
  const int64_t num_layers = proxy.header.value("num_layers", int64_t{0});
  SIFT_CHECK(num_layers > 0 && num_layers < 10000, path, ": bad num_layers");
  proxy.layers.resize(num_layers);
  for (const auto& t : proxy.header["tensors"]) {
    const int64_t layer = t.at("layer").get<int64_t>();
    SIFT_CHECK(layer >= 0 && layer < num_layers, path, ": tensor layer ", layer, " out of range");
    at::Tensor* field = Field(proxy.layers[layer], t.at("name").get<std::string>());
    SIFT_CHECK(field != nullptr, path, ": unknown tensor ", t.at("name").dump());
    const bool ints = t.at("dtype").get<std::string>() == "i64";
    const std::vector<int64_t> shape = t.at("shape").get<std::vector<int64_t>>();
    *field =
        at::empty(shape, at::TensorOptions().dtype(ints ? at::kLong : at::kFloat).device(at::kCPU));
    in.read(static_cast<char*>(field->data_ptr()),  // host: a new CPU tensor, filled from the file
            static_cast<std::streamsize>(field->nbytes()));
    SIFT_CHECK(in.good(), path, ": truncated tensor data (layer ", layer, ")");
  }
  for (int64_t l = 0; l < num_layers; ++l) {
    SptsLayerProxy& p = proxy.layers[l];
    for (const char* name : kNames) {
      SIFT_CHECK(Field(p, name)->defined(), path, ": layer ", l, " lacks tensor ", name);
    }
    const int64_t d_low = p.channels.size(0), r = p.gate_u.size(1);
    for (at::Tensor* v : {&p.gate_v, &p.up_v, &p.down_v}) {
      SIFT_CHECK(v->dim() == 2 && v->size(0) == r && v->size(1) == d_low, path, ": layer ", l,
                 ": inconsistent proxy shapes");
    }
  }
  return proxy;
}

void SptsProxy::CheckModel(const ModelConfig& config, const std::string& path) const {
  SIFT_CHECK(static_cast<int64_t>(layers.size()) == config.num_layers, path, ": the proxy has ",
             layers.size(), " layers, the model ", config.num_layers);
  for (size_t l = 0; l < layers.size(); ++l) {
    const SptsLayerProxy& p = layers[l];
    SIFT_CHECK(p.gate_u.size(0) == config.hidden_size && p.down_u.size(0) == config.hidden_size,
               path, ": layer ", l, ": proxy hidden size ", p.gate_u.size(0), ", the model's ",
               config.hidden_size);
    SIFT_CHECK(p.channels.numel() > 0 && HostInt(p.channels.max()) < config.intermediate_size &&
                   HostInt(p.channels.min()) >= 0,
               path, ": layer ", l, ": channel index outside the model's FFN width ",
               config.intermediate_size);
  }
}

std::shared_ptr<const SptsProxy> SptsProxy::LoadShared(const std::string& path,
                                                       const at::Device& device) {
  static std::mutex mutex;
  // (path, device) -> (stamp, proxy)
  static std::map<std::pair<std::string, std::string>,
                  std::pair<std::string, std::shared_ptr<const SptsProxy>>>
      cache;
  struct stat st {};
  SIFT_CHECK(::stat(path.c_str(), &st) == 0, "the SPTS proxy file ", path,
             " does not exist (generate it with sift-spts-calibrate, docs/methods/spts.md)");
  const std::string stamp = std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) +
                            "." + std::to_string(st.st_mtim.tv_nsec);
  std::lock_guard<std::mutex> lock(mutex);
  const std::pair<std::string, std::string> key(path, device.str());
  auto it = cache.find(key);
  if (it != cache.end() && it->second.first == stamp) return it->second.second;
  SptsProxy loaded = Load(path);
  auto proxy =
      std::make_shared<const SptsProxy>(device.is_cpu() ? std::move(loaded) : loaded.To(device));
  cache[key] = {stamp, proxy};
  return proxy;
}

}  // namespace sift::plugins
