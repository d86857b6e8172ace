// sift-model: inspect a model and run it from the command line.
//
//   sift-model info       MODEL                              metadata, tensor table, engine kernels
//   sift-model tokenize   MODEL (--text T | --chat M | stdin) ids as JSON
//   sift-model detokenize MODEL (--ids 1,2,3 | stdin)         text
//   sift-model logits     MODEL (--text T | --chat M | --ids) last-position top-k, JSON
//   sift-model generate   MODEL (--prompt T | --chat M)       streams text, timing on stderr
//
// `sift-model --help` lists every option.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "sift/device.h"
#include "sift/error.h"
#include "sift/generate.h"
#include "sift/gguf.h"
#include "sift/host.h"
#include "sift/model.h"
#include "sift/quantized_matrix.h"
#include "tools/common/command_line.h"

namespace po = boost::program_options;

namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

constexpr const char* kCommands[][2] = {
    {"info",
     "GGUF metadata and tensor table, the model's shape, and the engine's kernels for the "
     "chosen --dtype/--weights/--device (loads the model)"},
    {"tokenize", "token ids of --text (or --chat, rendered with the chat template, or stdin)"},
    {"detokenize", "text of --ids (or stdin)"},
    {"logits", "top-k logits at the last position of the prompt"},
    {"generate", "streams the answer; load/prefill/decode timing on stderr"},
};

struct Args {
  std::string command, model;
  po::variables_map vm;

  bool Has(const char* k) const { return vm.count(k) > 0; }
  template <typename T>
  T Get(const char* k) const {
    return vm[k].as<T>();
  }
  std::string Text(const char* k) const { return Has(k) ? Get<std::string>(k) : ""; }
};

void AddOptions(sift::cli::CommandLine* cl) {
  // clang-format off
  cl->Add()
      ("text", po::value<std::string>(), "prompt text (tokenize, logits)")
      ("prompt", po::value<std::string>(), "prompt text (same as --text)")
      ("chat", po::value<std::string>(), "a user message, rendered with the model's chat template")
      ("system", po::value<std::string>(), "a system message for --chat")
      ("ids", po::value<std::string>(), "token ids, e.g. 1,2,3 or [1, 2, 3]")
      ("no-special", po::bool_switch(), "tokenize special-token text as plain text")
      ("top-k", po::value<int64_t>()->default_value(0),
       "logits: how many to print (0 = 10); generate: top-k sampling (0 = off)")
      ("dtype", po::value<std::string>()->default_value("bf16"), "bf16 | fp32")
      ("weights", po::value<std::string>()->default_value("native"),
       "native (GGUF blocks for decode-sized products on the CPU) | dense")
      ("activations", po::value<std::string>()->default_value("auto"),
       "native weights: block products' activations, int8 (faster, rounded) | fp32 (exact) | "
       "auto (int8 where the CPU has AVX-512 VNNI)")
      ("device", po::value<std::string>()->default_value("cpu"), "cpu | cuda | cuda:N")
      ("threads", po::value<int>()->default_value(0), "CPU threads (0 = all cores)")
      ("max-tokens", po::value<int64_t>()->default_value(128), "generate: tokens at most")
      ("temperature", po::value<double>()->default_value(0.0), "generate: 0 = greedy")
      ("top-p", po::value<double>()->default_value(1.0), "generate: nucleus sampling")
      ("seed", po::value<uint64_t>()->default_value(0), "generate: sampling seed")
      ("stop", po::value<std::vector<std::string>>(), "generate: stop string (repeatable)")
      ("ignore-eos", po::bool_switch(), "generate: keep going past end-of-generation tokens");
  // clang-format on
}

std::vector<sift::TokenId> ParseIds(const std::string& s) {
  std::vector<sift::TokenId> ids;
  std::string cleaned;
  for (char c : s) cleaned += (c == '[' || c == ']' || c == ',') ? ' ' : c;
  std::istringstream in(cleaned);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(word, &used);
    } catch (const std::exception&) {
    }
    SIFT_CHECK(used == word.size() && v >= 0, "--ids: '", word, "' is not a token id");
    ids.push_back(static_cast<sift::TokenId>(v));
  }
  return ids;
}

std::string ReadStdin() {
  std::stringstream ss;
  ss << std::cin.rdbuf();
  return ss.str();
}

// The prompt as ids: --ids, --chat (rendered with the model's chat template) or --text/--prompt
// (with the model's BOS when it wants one). `from_stdin`: read the text from stdin when none is
// given (tokenize).
std::vector<sift::TokenId> PromptIds(const sift::Model& model, const Args& a, bool from_stdin) {
  if (a.Has("ids")) return ParseIds(a.Text("ids"));
  const sift::Tokenizer& tok = model.tokenizer();
  if (a.Has("chat")) {
    std::vector<sift::ChatMessage> messages;
    if (a.Has("system")) messages.push_back({"system", a.Text("system")});
    messages.push_back({"user", a.Text("chat")});
    return tok.Encode(tok.chat_template().Render(messages, /*add_generation_prompt=*/true));
  }
  std::string text = a.Has("text") ? a.Text("text") : a.Text("prompt");
  if (!a.Has("text") && !a.Has("prompt")) {
    SIFT_CHECK(from_stdin, "give --text, --prompt, --chat or --ids");
    text = ReadStdin();
  }
  std::vector<sift::TokenId> ids = tok.Encode(text, !a.Get<bool>("no-special"));
  if (tok.add_bos() && tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
  return ids;
}

// The prompt options of `command`, checked before the model loads: one input at most (before,
// --text silently won over --prompt, and --ids over --chat), --system only with --chat, and an
// input where stdin is not read.
void CheckInputs(const Args& a) {
  int inputs = 0;
  for (const char* k : {"ids", "chat", "text", "prompt"}) inputs += a.Has(k) ? 1 : 0;
  if (a.command == "info") return;
  if (a.command == "detokenize") {
    if (a.Has("chat") || a.Has("text") || a.Has("prompt")) {
      throw sift::cli::UsageError("detokenize takes --ids (or ids on stdin)");
    }
    return;
  }
  if (inputs > 1) throw sift::cli::UsageError("give one of --text, --prompt, --chat or --ids");
  if (inputs == 0 && a.command != "tokenize") {
    throw sift::cli::UsageError(a.command + " needs --text, --prompt, --chat or --ids");
  }
  if (a.Has("system") && !a.Has("chat")) throw sift::cli::UsageError("--system needs --chat");
}

std::shared_ptr<const sift::Model> LoadModel(const Args& a) {
  sift::ModelOptions options;
  // Every option is checked before the (slow) load.
  options.dtype = sift::ParseDtype(a.Get<std::string>("dtype"));
  options.weights = sift::ParseWeightFormat(a.Get<std::string>("weights"));
  options.device = sift::ParseDevice(a.Get<std::string>("device"));
  options.int8_activations = sift::Int8ActivationsFor(a.Get<std::string>("activations"), options);
  options.threads = a.Get<int>("threads");
  sift::ConfigureThreads(options.threads);
  return sift::Model::Load(a.model, options);
}

void PrintGguf(const std::string& path) {
  std::unique_ptr<sift::GgufFile> f = sift::GgufFile::Open(path);
  std::printf("file: %s\nversion: %u\nalignment: %llu\nsize: %llu bytes\n", f->path().c_str(),
              f->version(), static_cast<unsigned long long>(f->alignment()),
              static_cast<unsigned long long>(f->file_size()));
  std::printf("metadata (%zu keys):\n", f->metadata().size());
  for (const sift::GgufKeyValue& kv : f->metadata()) {
    std::printf("  %-44s %-8s %s\n", kv.key.c_str(), sift::GgufValueTypeName(kv.value.type()),
                kv.value.ToString().c_str());
  }
  std::map<std::string, int> per_type;
  std::printf("tensors (%zu):\n", f->tensors().size());
  for (const sift::GgufTensorInfo& t : f->tensors()) {
    std::string shape;
    for (size_t i = 0; i < t.ne.size(); ++i) shape += (i ? " x " : "") + std::to_string(t.ne[i]);
    std::printf("  %-28s %-6s [%s] %llu bytes\n", t.name.c_str(), sift::GgmlTypeName(t.type),
                shape.c_str(), static_cast<unsigned long long>(t.nbytes));
    per_type[sift::GgmlTypeName(t.type)]++;
  }
  std::printf("tensor types:");
  for (const auto& [name, count] : per_type) std::printf(" %s=%d", name.c_str(), count);
  std::printf("\n");
}

int Info(const Args& a) {
  if (!std::filesystem::is_directory(a.model)) PrintGguf(a.model);
  const auto t0 = Clock::now();
  std::shared_ptr<const sift::Model> model = LoadModel(a);
  const sift::ModelConfig& c = model->config();
  std::printf(
      "model: %s arch=%s layers=%lld hidden=%lld ff=%lld heads=%lld kv_heads=%lld head_dim=%lld "
      "ctx=%lld rope_theta=%g vocab=%lld tied=%d\n",
      c.name.c_str(), c.architecture.c_str(), (long long)c.num_layers, (long long)c.hidden_size,
      (long long)c.intermediate_size, (long long)c.num_heads, (long long)c.num_kv_heads,
      (long long)c.head_dim, (long long)c.context_length, c.rope_theta, (long long)c.vocab_size,
      c.tied_embeddings ? 1 : 0);
  std::printf("engine: device=%s dtype=%s weights=%s cpu=%s (detected %s) load=%.0f ms\n",
              model->options().device.str().c_str(), sift::DtypeName(model->options().dtype),
              model->native_weights() ? "native" : "dense", sift::CpuIsaName(sift::DefaultCpuIsa()),
              sift::CpuIsaName(sift::DetectedCpuIsa()), MsSince(t0));
  std::printf("kernels: %s\n", model->KernelSummary().c_str());
  return 0;
}

int Tokenize(const Args& a) {
  auto model = LoadModel(a);
  const nlohmann::json ids = PromptIds(*model, a, /*from_stdin=*/true);
  std::cout << ids.dump() << "\n";
  return 0;
}

int Detokenize(const Args& a) {
  auto model = LoadModel(a);
  const std::string spec = a.Has("ids") ? a.Text("ids") : ReadStdin();
  std::cout << model->tokenizer().Decode(ParseIds(spec)) << "\n";
  return 0;
}

int Logits(const Args& a) {
  auto model = LoadModel(a);
  std::vector<sift::TokenId> ids = PromptIds(*model, a, /*from_stdin=*/false);
  SIFT_CHECK(!ids.empty(), "the prompt has no tokens");
  sift::KvCache cache = model->NewCache();
  at::Tensor logits = model->Forward(ids, 0, cache);
  const int64_t k = a.Get<int64_t>("top-k") > 0 ? a.Get<int64_t>("top-k") : 10;
  auto [values, indices] = logits.topk(std::min<int64_t>(k, logits.size(-1)));
  nlohmann::json out;
  out["n_tokens"] = ids.size();
  out["dtype"] = sift::DtypeName(model->options().dtype);
  // top-k on the model's device; only the k winners come to the host.
  const std::vector<int64_t> top_ids = sift::HostInts(indices);
  const at::Tensor host_values = sift::ToHost(values);
  const float* v = host_values.data_ptr<float>();  // host: ToHost'd
  out["top_ids"] = top_ids;
  out["top_logits"] = std::vector<float>(v, v + host_values.numel());
  std::vector<std::string> pieces;
  for (int64_t id : top_ids) pieces.push_back(model->tokenizer().TokenBytes(id));
  out["top_tokens"] = pieces;
  std::cout << out.dump() << "\n";
  return 0;
}

int Generate(const Args& a) {
  const auto t_load = Clock::now();
  auto model = LoadModel(a);
  const double load_ms = MsSince(t_load);
  std::vector<sift::TokenId> ids = PromptIds(*model, a, /*from_stdin=*/false);
  SIFT_CHECK(!ids.empty(), "the prompt has no tokens");
  SIFT_CHECK(static_cast<int64_t>(ids.size()) < model->config().context_length, "prompt of ",
             ids.size(), " tokens does not fit the model's context of ",
             model->config().context_length);

  sift::GenerationOptions g;
  g.max_tokens = a.Get<int64_t>("max-tokens");
  g.sampling.temperature = a.Get<double>("temperature");
  g.sampling.top_k = a.Get<int64_t>("top-k");
  g.sampling.top_p = a.Get<double>("top-p");
  g.sampling.seed = a.Get<uint64_t>("seed");
  g.ignore_eog = a.Get<bool>("ignore-eos");
  if (a.Has("stop")) g.stop_strings = a.Get<std::vector<std::string>>("stop");

  const auto t0 = Clock::now();
  sift::KvCache cache = model->NewCache();
  cache.set_headroom(g.max_tokens);
  at::Tensor logits = model->Forward(ids, 0, cache);
  const double prefill_ms = MsSince(t0);
  sift::GenerationResult r = sift::Generate(*model, cache, logits, static_cast<int64_t>(ids.size()),
                                            g, [](const std::string& piece, sift::TokenId) {
                                              std::fwrite(piece.data(), 1, piece.size(), stdout);
                                              std::fflush(stdout);
                                              return true;
                                            });
  std::printf("\n");
  const double n = static_cast<double>(r.tokens.size());
  std::fprintf(stderr,
               "[sift-model] load %.0f ms | prompt %zu tokens, prefill %.1f ms (%.0f tok/s) | "
               "%zu tokens generated in %.1f ms (%.1f ms/token) | finish=%s | kv %.2f MiB | %s | "
               "%s\n",
               load_ms, ids.size(), prefill_ms, ids.size() / (prefill_ms / 1000.0), r.tokens.size(),
               r.decode_ms, n > 0 ? r.decode_ms / n : 0.0, sift::FinishReasonName(r.finish),
               cache.Bytes() / 1048576.0, sift::DtypeName(model->options().dtype),
               model->KernelSummary().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sift::ConfigureThreadEnvironment(argv);
  sift::cli::CommandLine cl("sift-model", "sift-model COMMAND MODEL [options]",
                            "Inspects a model and runs it from the command line. MODEL is a GGUF "
                            "file or a Hugging Face\ndirectory (config.json + safetensors).");
  AddOptions(&cl);
  for (const auto& [name, summary] : kCommands) cl.Command(name, summary);
  Args a;
  cl.Positional("command", 1, po::value(&a.command));
  cl.Positional("model", 1, po::value(&a.model));
  if (const int status = cl.Parse(argc, argv, &a.vm); status != sift::cli::kContinue) {
    return status;
  }
  std::string commands;
  bool known = false;
  for (const auto& [name, summary] : kCommands) {
    commands += (commands.empty() ? "" : ", ") + std::string(name);
    known = known || a.command == name;
  }
  if (a.command.empty()) return cl.Error("no command (" + commands + ")");
  if (!known) return cl.Error("unknown command '" + a.command + "' (" + commands + ")");
  if (a.model.empty()) return cl.Error("no MODEL (a GGUF file or a Hugging Face directory)");
  return sift::cli::Run("sift-model", 1, [&] {
    CheckInputs(a);
    if (a.command == "info") return Info(a);
    if (a.command == "tokenize") return Tokenize(a);
    if (a.command == "detokenize") return Detokenize(a);
    if (a.command == "logits") return Logits(a);
    return Generate(a);
  });
}
