// siftd's options: command-line flags and an optional config file (docs/operations.md).
//
// The config file uses the flags' long names as keys, one "key = value" per line ('#' starts a
// comment); flags given on the command line win over the file. Defaults make
//   build/bin/siftd
// work from the repository root (model, pipelines, build/plugins; client port
// tcp://127.0.0.1:7700, operations HTTP 127.0.0.1:7701).
//
// THREADING: parsed once in main.
// ERRORS:    ParseOptions reports unknown options, bad values and unreadable config files in
//            `message` and returns kError.
#ifndef SIFT_DAEMON_OPTIONS_H_
#define SIFT_DAEMON_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace sift::daemon {

struct DaemonOptions {
  std::string config_file;
  // Model and catalog.
  std::string model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::string pipelines_dir = "pipelines";
  std::string plugins_dir = "build/plugins";
  std::string staging_dir;  // where plugin copies go; "" = a fresh temp dir
  std::string device = "cpu";
  std::string dtype = "bf16";
  std::string weights = "native";  // sift::WeightFormat
  // sift::Int8ActivationsFor: auto | int8 | fp32 (Validate folds --int8-activations into it).
  std::string activations = "auto";
  bool int8_activations = false;  // --int8-activations: the older spelling of --activations int8
  int threads = 0;                // LibTorch intra-op threads; 0 = all cores
  int64_t n_ctx = 0;              // context limit; 0 = the model's
  int64_t question_tokens = 32;
  // Serving.
  std::vector<std::string> bind = {"tcp://127.0.0.1:7700"};
  std::string http = "127.0.0.1:7701";  // "" or "off" disables the operations port
  int workers = 64;  // requests in flight at once (batched); beyond them they queue
  int64_t queue_size = 64;
  // Continuous batching (docs/operations.md#batching).
  int64_t max_batch = 64;  // rows per decode step; 0 = no batching (a request per worker)
  // Prompt tokens per prefill forward; 0 = the whole prompt. -1 (the default) picks by device:
  // 512 on the CPU, 0 on CUDA (Validate resolves it).
  int64_t prefill_chunk = -1;
  int64_t decode_interval_ms = 200;  // a decode step at least this often while stages run
  // The batch's KV during decode: "auto" (in a decode pool where its steps are CUDA graphs),
  // "on" (in a pool wherever one runs), "off" (each request's own cache). sift/decode_pool.h.
  std::string decode_pool = "auto";
  std::string kv_budget = "50%";  // KV memory for admission: bytes (K/M/G/T) or % of memory
  int64_t kv_budget_bytes = 0;    // kv_budget in bytes: set by ParseOptions once it is valid
  // The prefix cache (docs/context-cache.md): full KV of earlier prompts inside the KV budget.
  bool prefix_cache = true;
  int64_t prefix_cache_min_tokens = 64;  // shorter prompts are not cached, shorter matches miss
  int io_nice = 0;  // nice added to every thread but the batch loop's (thread_priority.h); 0 = off
  int heartbeat_ms = 1000;
  int rescan_ms = 1000;  // 0: rescan only on SIGHUP
  int drain_timeout_ms = 30000;
  int64_t default_deadline_ms = 0;
  int hwm = 10000;
  int linger_ms = 2000;
  int64_t max_message_bytes = 64ll << 20;
  int64_t max_header_bytes = 8ll << 20;  // the JSON header frame (limits: docs/operations.md)
  int64_t max_client_inflight = 32;      // admitted requests per connection; 0 = no limit
  int64_t max_tokens_limit = 4096;       // generated tokens per request, whatever it asks
  bool allow_ignore_eos = false;         // whether clients may send ignore_eos
  // Security.
  std::string curve_secret_key;
  std::string curve_client_keys;
  std::string make_curve_keys;  // PREFIX: write a key pair and exit
  // Remote stages (stage hops to `siftd --worker`): this daemon's key pair and the default
  // worker public key (a file or Z85; a stage's worker_key replaces it).
  std::string hop_curve_secret_key;
  std::string hop_curve_worker_key;
  // OpenAI-compatible HTTP port (docs/openai.md); off unless `openai` is set.
  std::string openai;  // [host:]port (listen_address.h); "" or "off" disables
  std::string openai_api_keys;
  int64_t openai_max_body_bytes = 16ll << 20;
  int openai_max_connections = 512;
  int openai_timeout_ms = 30000;
  int openai_idle_timeout_ms = 5000;         // idle keep-alive and a request header's arrival
  int openai_max_connections_per_peer = 16;  // per client IP address
  // Operations.
  std::string log_level = "info";
  std::string log_format = "auto";  // json, text, or auto: text when stderr is a terminal
  std::string ready_file;
  // Worker mode (a remote stage host): siftd --worker --bind tcp://...
  bool worker = false;
  // Plugin pre-flight (daemon/plugin_preflight.h).
  int preflight_timeout_ms = 10000;    // per plugin file
  std::vector<std::string> preflight;  // internal: check these files and exit (the child)
};

enum class ParseResult { kRun, kExitOk, kError };

// On kExitOk (--help, --version) `message` holds the text to print; on kError, the problem.
ParseResult ParseOptions(int argc, const char* const* argv, DaemonOptions* options,
                         std::string* message);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_OPTIONS_H_
