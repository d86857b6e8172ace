#include "daemon/model_defaults.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "daemon/toml_json.h"
#include "sift/error.h"

namespace sift::daemon {
namespace {

namespace fs = std::filesystem;

std::string At(const std::string& file, const toml::node& node) {
  return file + ":" + std::to_string(node.source().begin.line);
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string StringValue(const std::string& file, const toml::node& node, const std::string& key) {
  if (!node.is_string()) throw Error(At(file, node) + ": key '" + key + "' must be a string");
  return node.as_string()->get();
}

int64_t PositiveInt(const std::string& file, const toml::node& node, const std::string& key) {
  if (!node.is_integer() || node.as_integer()->get() < 1) {
    throw Error(At(file, node) + ": key '" + key + "' must be a positive integer");
  }
  return node.as_integer()->get();
}

ModelDefaults Parse(const toml::table& root, const std::string& file) {
  ModelDefaults d;
  d.file = file;
  const toml::node* match = root.get("match");
  if (match == nullptr || !match->is_table()) {
    throw Error(file +
                ":1: missing [match] table (architecture = \"...\", optional num_layers, "
                "hidden_size, name)");
  }
  for (auto&& [key, value] : root) {
    const std::string k(key.str());
    if (k == "match") continue;
    if (k == "description") {
      d.description = StringValue(file, value, k);
    } else if (k == "evidence") {
      d.evidence = StringValue(file, value, k);
    } else if (const toml::table* table = value.as_table()) {
      auto& params = d.plugins[k];
      for (auto&& [pkey, pvalue] : *table) {
        const std::string p(pkey.str());
        params[p] = ModelDefaults::Value{TomlToJson(file, pvalue, p), At(file, pvalue)};
      }
    } else {
      throw Error(At(file, value) + ": unknown key '" + k +
                  "' (expected description, evidence, [match] and one table per plugin)");
    }
  }
  for (auto&& [key, value] : *match->as_table()) {
    const std::string k(key.str());
    if (k == "architecture") {
      d.architecture = StringValue(file, value, k);
    } else if (k == "num_layers") {
      d.num_layers = PositiveInt(file, value, k);
    } else if (k == "hidden_size") {
      d.hidden_size = PositiveInt(file, value, k);
    } else if (k == "name") {
      d.name = StringValue(file, value, k);
    } else {
      throw Error(At(file, value) + ": [match]: unknown key '" + k +
                  "' (expected architecture, num_layers, hidden_size, name)");
    }
  }
  if (d.architecture.empty()) {
    throw Error(At(file, *match) + ": [match] needs architecture = \"...\"");
  }
  return d;
}

}  // namespace

bool ModelDefaults::Matches(const ModelConfig& config) const {
  return architecture == config.architecture &&
         (num_layers == 0 || num_layers == config.num_layers) &&
         (hidden_size == 0 || hidden_size == config.hidden_size) &&
         (name.empty() || Lower(config.name).find(Lower(name)) != std::string::npos);
}

std::vector<ModelDefaults> LoadModelDefaults(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::error_code fec;
    if (e.is_regular_file(fec) && e.path().extension() == ".toml") {
      files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<ModelDefaults> out;
  for (const std::string& file : files) {
    try {
      out.push_back(Parse(toml::parse_file(file), file));
    } catch (const toml::parse_error& e) {
      throw Error(file + ":" + std::to_string(e.source().begin.line) + ": " +
                  std::string(e.description()));
    }
  }
  return out;
}

const ModelDefaults* MatchModelDefaults(const std::vector<ModelDefaults>& all,
                                        const ModelConfig& config) {
  const ModelDefaults* found = nullptr;
  for (const ModelDefaults& d : all) {
    if (!d.Matches(config)) continue;
    if (found != nullptr) {
      throw Error(d.file + ": matches the model '" + config.name + "' as " + found->file +
                  " does; make [match] more specific (num_layers, hidden_size, name)");
    }
    found = &d;
  }
  return found;
}

void ApplyModelDefaults(const ModelDefaults& defaults, const std::string& plugin,
                        StageParams* params) {
  const auto it = defaults.plugins.find(plugin);
  if (it == defaults.plugins.end()) return;
  for (const auto& [key, value] : it->second) {
    if (!params->Has(key)) params->Set(key, value.value, value.origin);
  }
}

void ApplyModelDefaultsFromDir(const std::string& pipelines_dir, const ModelConfig& config,
                               StageParams* params) {
  const std::vector<ModelDefaults> all =
      LoadModelDefaults((fs::path(pipelines_dir) / "models").string());
  if (const ModelDefaults* d = MatchModelDefaults(all, config)) {
    ApplyModelDefaults(*d, params->plugin(), params);
  }
}

std::string ModelDefaultsDir(const std::string& pipeline_file) {
  return (fs::path(pipeline_file).parent_path() / "models").string();
}

}  // namespace sift::daemon
