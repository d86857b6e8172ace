#include "daemon/options.h"

#include <boost/program_options.hpp>
#include <fstream>

#include "daemon/kv_budget.h"
#include "tools/common/command_line.h"

namespace sift::daemon {

namespace po = boost::program_options;

namespace {

// Modes, config file, logging.
po::options_description GeneralOptions(DaemonOptions* o) {
  po::options_description general("General");
  general.add_options()("version", "print the version and exit")(
      "config", po::value(&o->config_file), "config file (key = value, keys as the long flags)")(
      "log-level", po::value(&o->log_level)->default_value(o->log_level),
      "debug, info, warn or error")(
      "log-format", po::value(&o->log_format)->default_value(o->log_format),
      "text (for people), json (one object per line, for machines) or auto: text when stderr "
      "is a terminal, else json")("ready-file", po::value(&o->ready_file),
                                  "write {pid, endpoints, http} as JSON here once serving")(
      "make-curve-keys", po::value(&o->make_curve_keys)->value_name("PREFIX"),
      "write a CURVE key pair to PREFIX.key (secret) and PREFIX.pub, then exit")(
      "worker", po::bool_switch(&o->worker),
      "serve remote pipeline stages on --bind instead of clients")(
      "preflight", po::value(&o->preflight)->multitoken()->value_name("FILE..."),
      "check plugin files in this process (load, descriptor, factory) and exit; siftd runs "
      "this in a child process before it loads a new or changed plugin");
  return general;
}

// --model, the plugin and pipeline folders, the engine.
po::options_description ModelOptions(DaemonOptions* o) {
  po::options_description model("Model and catalog");
  model.add_options()("model", po::value(&o->model)->default_value(o->model),
                      "GGUF file or HF directory")(
      "pipelines", po::value(&o->pipelines_dir)->default_value(o->pipelines_dir),
      "folder of pipeline TOML files")("plugins",
                                       po::value(&o->plugins_dir)->default_value(o->plugins_dir),
                                       "folder of stage plugins (*.so)")(
      "staging-dir", po::value(&o->staging_dir), "where loaded plugin copies go (default: temp)")(
      "device", po::value(&o->device)->default_value(o->device), "cpu or cuda")(
      "dtype", po::value(&o->dtype)->default_value(o->dtype), "bf16 or fp32")(
      "weights", po::value(&o->weights)->default_value(o->weights),
      "native: decode multiplies by the GGUF's own blocks; dense: by the dequantised copy")(
      "activations", po::value(&o->activations)->default_value(o->activations),
      "native weights: the block products' activations. int8: quantised per 32 values (faster "
      "decode, activation rounding); fp32: exact (the reference); auto: int8 where the CPU has "
      "AVX-512 VNNI (rows packed at load), fp32 elsewhere")(
      "int8-activations", po::bool_switch(&o->int8_activations), "the same as --activations int8")(
      "threads", po::value(&o->threads)->default_value(o->threads),
      "LibTorch intra-op threads (0 = all cores)")(
      "n-ctx", po::value(&o->n_ctx)->default_value(o->n_ctx),
      "context limit in tokens (0 = the model's); longer prompts are refused. Past the model's "
      "trained context RoPE extrapolates: for speed measurements, not answers")(
      "question-tokens", po::value(&o->question_tokens)->default_value(o->question_tokens),
      "question span of a raw prompt: its last N tokens");
  return model;
}

// The client port, admission, workers, limits.
po::options_description ServingOptions(DaemonOptions* o) {
  po::options_description serving("Serving");
  serving.add_options()(
      "bind", po::value(&o->bind)->composing(),
      "client endpoint (repeatable; default tcp://127.0.0.1:7700; port * = any free port)")(
      "http", po::value(&o->http)->default_value(o->http),
      "operations HTTP host:port on loopback (/health, /metrics); 'off' disables")(
      "workers", po::value(&o->workers)->default_value(o->workers),
      "requests in flight at once (each holds a worker thread; with batching their compute "
      "shares the one batch loop, without it each worker computes on its own)")(
      "queue-size", po::value(&o->queue_size)->default_value(o->queue_size),
      "admission queue length; beyond it requests get RESOURCE_EXHAUSTED")(
      "heartbeat-ms", po::value(&o->heartbeat_ms)->default_value(o->heartbeat_ms),
      "heartbeat to a client whose request has been quiet this long (0 = off)")(
      "rescan-ms", po::value(&o->rescan_ms)->default_value(o->rescan_ms),
      "rescan plugins and pipelines this often (0 = only on SIGHUP)")(
      "drain-timeout-ms", po::value(&o->drain_timeout_ms)->default_value(o->drain_timeout_ms),
      "on SIGTERM, how long admitted requests may finish before they are cancelled")(
      "default-deadline-ms",
      po::value(&o->default_deadline_ms)->default_value(o->default_deadline_ms),
      "deadline for requests that set none (0 = none)")(
      "hwm", po::value(&o->hwm)->default_value(o->hwm), "ZeroMQ send/receive high-water mark")(
      "linger-ms", po::value(&o->linger_ms)->default_value(o->linger_ms),
      "ZeroMQ linger on close (delivery of the last messages)")(
      "max-message-bytes", po::value(&o->max_message_bytes)->default_value(o->max_message_bytes),
      "largest client message accepted")(
      "max-header-bytes", po::value(&o->max_header_bytes)->default_value(o->max_header_bytes),
      "largest JSON header frame accepted (checked before parsing)")(
      "max-client-inflight",
      po::value(&o->max_client_inflight)->default_value(o->max_client_inflight),
      "admitted requests per client connection (0 = no limit)")(
      "max-tokens-limit", po::value(&o->max_tokens_limit)->default_value(o->max_tokens_limit),
      "tokens one request may generate, on both ports: a larger max_tokens (or an OpenAI chat "
      "without one) is lowered to it")(
      "allow-ignore-eos", po::value(&o->allow_ignore_eos)->default_value(o->allow_ignore_eos),
      "true: clients may send ignore_eos (benchmarks); false: it is refused")(
      "preflight-timeout-ms",
      po::value(&o->preflight_timeout_ms)->default_value(o->preflight_timeout_ms),
      "how long a plugin file may take to load in the pre-flight child");
  return serving;
}

// Continuous batching and admission by KV memory.
po::options_description BatchingOptions(DaemonOptions* o) {
  po::options_description batching("Batching (docs/operations.md#batching)");
  batching.add_options()(
      "max-batch", po::value(&o->max_batch)->default_value(o->max_batch),
      "decode rows per step of the batch loop (0 = no batching: each worker runs its request "
      "alone)")("prefill-chunk", po::value(&o->prefill_chunk)->default_value(o->prefill_chunk),
                "prompt tokens per prefill forward (0 = the whole prompt at once; -1 = by device: "
                "512 on the CPU, 0 on CUDA, where a chunked 32K prefill measured 46-90x slower)")(
      "decode-interval-ms", po::value(&o->decode_interval_ms)->default_value(o->decode_interval_ms),
      "while a request's prefill (or other stage work) runs, the decode batch gets a step at the "
      "stage's next layer once this long has passed since its last one (0 = at every layer)")(
      "decode-pool", po::value(&o->decode_pool)->default_value(o->decode_pool),
      "where the batch's KV lives while it decodes: auto (in one pool at fixed addresses where "
      "its steps replay as CUDA graphs), on (in the pool on any device), off (each request's "
      "own cache)")(
      "kv-budget", po::value(&o->kv_budget)->default_value(o->kv_budget),
      "KV-cache memory requests reserve before they run: bytes with K/M/G/T, or a percentage "
      "of the machine's memory; a request waits while its KV does not fit")(
      "prefix-cache", po::value(&o->prefix_cache)->default_value(o->prefix_cache),
      "keep the full KV of earlier prompts inside the KV budget (evicted least recently used, "
      "and whenever a request needs the memory): a prompt that starts with one prefills only "
      "the rest (docs/context-cache.md)")(
      "prefix-cache-min-tokens",
      po::value(&o->prefix_cache_min_tokens)->default_value(o->prefix_cache_min_tokens),
      "prompts shorter than this are not cached, and a shorter common prefix is a miss")(
      "io-nice", po::value(&o->io_nice)->default_value(o->io_nice),
      "with batching: nice value added to every thread but the batch loop's (I/O, hop relays, "
      "workers), so per-token wake-ups do not take cores from the compute (0 = off)");
  return batching;
}

// CURVE on the client port.
po::options_description SecurityOptions(DaemonOptions* o) {
  po::options_description security("Security");
  security.add_options()("curve-secret-key", po::value(&o->curve_secret_key),
                         "server CURVE secret key file (enables CURVE on the client port, or "
                         "with --worker on the worker port)")(
      "curve-client-keys", po::value(&o->curve_client_keys),
      "file of authorised client public keys, one per line (with --worker: the daemons' keys)")(
      "hop-curve-secret-key", po::value(&o->hop_curve_secret_key)->value_name("FILE"),
      "this daemon's CURVE secret key for connecting to remote stage workers (its public key "
      "goes into the workers' --curve-client-keys)")(
      "hop-curve-worker-key", po::value(&o->hop_curve_worker_key)->value_name("FILE|KEY"),
      "the workers' CURVE public key for remote stages without their own worker_key");
  return security;
}

// The OpenAI-compatible HTTP port.
po::options_description OpenAiOptions(DaemonOptions* o) {
  po::options_description openai("OpenAI-compatible HTTP (docs/openai.md)");
  openai.add_options()("openai", po::value(&o->openai)->value_name("[HOST:]PORT"),
                       "serve /v1/chat/completions, /v1/completions and /v1/models here (off "
                       "by default; a bare port is on 127.0.0.1); a non-loopback host needs "
                       "--openai-api-keys")(
      "openai-api-keys", po::value(&o->openai_api_keys)->value_name("FILE"),
      "file of accepted API keys (Authorization: Bearer), one per line")(
      "openai-max-body-bytes",
      po::value(&o->openai_max_body_bytes)->default_value(o->openai_max_body_bytes),
      "largest request body (413 beyond)")(
      "openai-max-connections",
      po::value(&o->openai_max_connections)->default_value(o->openai_max_connections),
      "open connections at most (503 beyond)")(
      "openai-max-connections-per-peer",
      po::value(&o->openai_max_connections_per_peer)
          ->default_value(o->openai_max_connections_per_peer),
      "open connections from one client IP address at most (503 beyond)")(
      "openai-idle-timeout-ms",
      po::value(&o->openai_idle_timeout_ms)->default_value(o->openai_idle_timeout_ms),
      "how long a connection may wait before its next request's header is complete (new and "
      "keep-alive connections)")(
      "openai-timeout-ms", po::value(&o->openai_timeout_ms)->default_value(o->openai_timeout_ms),
      "limit for receiving a request's body and for each write");
  return openai;
}

// The ranges the values must lie in; "" when they do. Fills the values derived from them
// (kv_budget_bytes).
std::string Validate(DaemonOptions& o) {
  if (o.workers < 1 || o.workers > 256) return "--workers must be in [1, 256]";
  if (o.max_batch < 0 || o.max_batch > 4096) return "--max-batch must be in [0, 4096]";
  if (o.prefill_chunk < -1) return "--prefill-chunk must be >= 0 (or -1: by device)";
  // By device: on the CPU, chunks keep running streams flowing during a long prefill; on an
  // H100, chunks of 512 made a 32K prefill take 22 s against 0.24 s whole (docs/results/gpu.md).
  if (o.prefill_chunk == -1) o.prefill_chunk = o.device.rfind("cuda", 0) == 0 ? 0 : 512;
  if (o.decode_interval_ms < 0 || o.decode_interval_ms > 60000) {
    return "--decode-interval-ms must be in [0, 60000]";
  }
  if (o.decode_pool != "auto" && o.decode_pool != "on" && o.decode_pool != "off") {
    return "--decode-pool must be auto, on or off";
  }
  if (o.io_nice < 0 || o.io_nice > 19) return "--io-nice must be in [0, 19]";
  // sift::IsActivationsMode's values (sift/model.h; this library does not link the runtime).
  if (o.activations != "auto" && o.activations != "int8" && o.activations != "fp32") {
    return "--activations must be auto, int8 or fp32";
  }
  if (o.int8_activations) {
    if (o.activations == "fp32") return "--int8-activations contradicts --activations fp32";
    o.activations = "int8";
  }
  if (o.prefix_cache_min_tokens < 1) return "--prefix-cache-min-tokens must be >= 1";
  std::string kv_error;
  if (!ParseKvBudget(o.kv_budget, PhysicalMemoryBytes(), &o.kv_budget_bytes, &kv_error)) {
    return kv_error;
  }
  if (o.queue_size < 1 || o.queue_size > 1000000) {
    return "--queue-size must be in [1, 1000000]";
  }
  if (o.hwm < 1) return "--hwm must be positive (finite high-water marks)";
  if (o.heartbeat_ms < 0 || o.rescan_ms < 0 || o.drain_timeout_ms < 0 ||
      o.default_deadline_ms < 0 || o.linger_ms < 0 || o.n_ctx < 0 || o.question_tokens < 0 ||
      o.threads < 0) {
    return "negative values are not allowed for times, sizes and counts";
  }
  if (o.max_message_bytes < 1024) return "--max-message-bytes must be at least 1024";
  if (o.max_header_bytes < 1024) return "--max-header-bytes must be at least 1024";
  if (o.max_client_inflight < 0 || o.preflight_timeout_ms < 100) {
    return "--max-client-inflight must be >= 0 and --preflight-timeout-ms >= 100";
  }
  if (o.openai_max_body_bytes < 1024 || o.openai_max_connections < 1 || o.openai_timeout_ms < 100) {
    return "--openai-max-body-bytes >= 1024, --openai-max-connections >= 1 and "
           "--openai-timeout-ms >= 100 are required";
  }
  if (o.openai_max_connections_per_peer < 1 || o.openai_idle_timeout_ms < 100) {
    return "--openai-max-connections-per-peer >= 1 and --openai-idle-timeout-ms >= 100 are "
           "required";
  }
  if (o.max_tokens_limit < 1 || o.max_tokens_limit > (1 << 20)) {
    return "--max-tokens-limit must be in [1, 1048576]";
  }
  return "";
}

// Parses the command line and the config file into `vm`; kRun unless --help or an error.
ParseResult Store(const sift::cli::CommandLine& command_line, int argc, const char* const* argv,
                  po::variables_map* vm_out, std::string* message) {
  po::variables_map& vm = *vm_out;
  try {
    command_line.Store(std::vector<std::string>(argv + (argc > 0 ? 1 : 0), argv + argc), &vm);
    if (vm.count("help")) {
      *message = command_line.Help();
      while (!message->empty() && message->back() == '\n') message->pop_back();
      return ParseResult::kExitOk;
    }
    if (vm.count("config")) {
      const std::string file = vm["config"].as<std::string>();
      std::ifstream in(file);
      if (!in) {
        *message = "cannot read config file " + file;
        return ParseResult::kError;
      }
      po::store(po::parse_config_file(in, command_line.all_options()), vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    *message = e.what();
    return ParseResult::kError;
  }
  return ParseResult::kRun;
}

}  // namespace

ParseResult ParseOptions(int argc, const char* const* argv, DaemonOptions* o,
                         std::string* message) {
  // The shared command line (tools/common/command_line.h): --help, -h and a value that may start
  // with '-'. The config file takes the same options.
  sift::cli::CommandLine command_line("siftd", "siftd [options]",
                                      "Serves an LLM through pipelines of compression stages "
                                      "(docs/operations.md).");
  for (const po::options_description& group :
       {GeneralOptions(o), ModelOptions(o), ServingOptions(o), BatchingOptions(o),
        SecurityOptions(o), OpenAiOptions(o)}) {
    command_line.AddGroup(group);
  }
  po::variables_map vm;
  const ParseResult stored = Store(command_line, argc, argv, &vm, message);
  if (stored != ParseResult::kRun) return stored;
  if (vm.count("version")) {
    *message = "siftd 0.1.0 (protocol SIFT/1)";
    return ParseResult::kExitOk;
  }
  if (o->bind.empty()) o->bind = {"tcp://127.0.0.1:7700"};
  *message = Validate(*o);
  return message->empty() ? ParseResult::kRun : ParseResult::kError;
}

}  // namespace sift::daemon
