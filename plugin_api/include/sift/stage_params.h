// Typed access to a stage's parameters, with errors that say where the value came from.
//
// The daemon builds a StageParams from the pipeline TOML table of a stage (each key remembers
// its file and line) and overlays the request's per-request overrides (origin "request").
// Plugins read their parameters in their constructor; any problem throws sift::Error with a
// message like
//   pipelines/snapkv.toml:14: stage 'select' (plugin snapkv): key 'window': expected an
//   integer in [1, 4096], got -3
// After construction the daemon rejects keys nobody read (typos), with the same kind of message.
//
// THREADING: not thread-safe (records which keys were read); one instance per stage instance.
#ifndef SIFT_STAGE_PARAMS_H_
#define SIFT_STAGE_PARAMS_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace sift {

class StageParams {
 public:
  StageParams() = default;
  // `stage` is the stage's label in the pipeline, `plugin` its plugin name, `file` the TOML path.
  StageParams(std::string file, std::string stage, std::string plugin)
      : file_(std::move(file)), stage_(std::move(stage)), plugin_(std::move(plugin)) {}

  // Sets a value and where it came from ("pipelines/x.toml:12" or "request").
  void Set(const std::string& key, nlohmann::json value, std::string origin);
  bool Has(const std::string& key) const { return values_.count(key) > 0; }

  // Getters: the fallback is returned when the key is absent. Range bounds are inclusive.
  int64_t GetInt(const std::string& key, int64_t fallback, int64_t min = INT64_MIN,
                 int64_t max = INT64_MAX) const;
  double GetDouble(const std::string& key, double fallback, double min = -1e300,
                   double max = 1e300) const;
  bool GetBool(const std::string& key, bool fallback) const;
  // `allowed` empty = any string.
  std::string GetString(const std::string& key, const std::string& fallback,
                        const std::vector<std::string>& allowed = {}) const;
  std::vector<int64_t> GetIntList(const std::string& key, const std::vector<int64_t>& fallback,
                                  int64_t min = INT64_MIN, int64_t max = INT64_MAX) const;
  // Required variants throw when absent.
  int64_t RequireInt(const std::string& key, int64_t min = INT64_MIN, int64_t max = INT64_MAX) const;

  // Keys that were set but never read.
  std::vector<std::string> UnreadKeys() const;
  // Throws sift::Error naming the location of `key` (for checks across several keys).
  [[noreturn]] void Fail(const std::string& key, const std::string& what) const;

  const std::string& stage() const { return stage_; }
  const std::string& plugin() const { return plugin_; }
  const std::string& file() const { return file_; }
  // All values, e.g. for forwarding to a remote worker.
  nlohmann::json ToJson() const;

 private:
  struct Entry {
    nlohmann::json value;
    std::string origin;
  };
  const Entry* Lookup(const std::string& key) const;
  std::string Where(const std::string& key) const;

  std::string file_, stage_, plugin_;
  std::map<std::string, Entry> values_;
  mutable std::set<std::string> read_;
};

}  // namespace sift

#endif  // SIFT_STAGE_PARAMS_H_
