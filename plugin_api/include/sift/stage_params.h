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
// Cost cap: per-request overrides (origin "request") come from untrusted clients, and some
// parameters set how much work a stage does (a chunk of 1 token runs the model once per
// token). A stage declares, with such a parameter, the narrower range a request may use
// (RequestCap); pipeline files, written by the operator, may use the full range. A request
// outside the cap fails with a message that names the key, the cap and why.
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

// The part of an integer parameter's range a per-request override may use.
struct RequestCap {
  int64_t min = INT64_MIN;
  int64_t max = INT64_MAX;
  bool allow_zero = false;  // 0 ("off", e.g. no chunking) is allowed besides [min, max]
};

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
  // Same, and a value set by a request must also be within `cap` (see Cost cap above).
  int64_t GetInt(const std::string& key, int64_t fallback, int64_t min, int64_t max,
                 const RequestCap& cap) const;
  double GetDouble(const std::string& key, double fallback, double min = -1e300,
                   double max = 1e300) const;
  bool GetBool(const std::string& key, bool fallback) const;
  // `allowed` empty = any string.
  std::string GetString(const std::string& key, const std::string& fallback,
                        const std::vector<std::string>& allowed = {}) const;
  std::vector<int64_t> GetIntList(const std::string& key, const std::vector<int64_t>& fallback,
                                  int64_t min = INT64_MIN, int64_t max = INT64_MAX) const;
  // Required variants throw when absent.
  int64_t RequireInt(const std::string& key, int64_t min = INT64_MIN,
                     int64_t max = INT64_MAX) const;

  // True when `key`'s value came from a per-request override (origin "request").
  bool FromRequest(const std::string& key) const;

  // Keys that were set but never read.
  std::vector<std::string> UnreadKeys() const;
  // Throws sift::Error naming the location of `key` (for checks across several keys).
  [[noreturn]] void Fail(const std::string& key, const std::string& what) const;

  const std::string& stage() const { return stage_; }
  const std::string& plugin() const { return plugin_; }
  const std::string& file() const { return file_; }
  // The origin of per-request overrides (what the daemon passes to Set).
  static constexpr const char* kRequestOrigin = "request";
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
