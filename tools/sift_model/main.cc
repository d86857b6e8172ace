// sift-model: inspect a model and run it from the command line.
//
//   sift-model info       MODEL                      metadata and tensor table
//   sift-model tokenize   MODEL --text T [--no-special]   ids as JSON
//   sift-model detokenize MODEL --ids 1,2,3          text
//   sift-model logits     MODEL (--text T | --chat M) [--top-k 10]   last-position top-k, JSON
//   sift-model generate   MODEL (--prompt T | --chat M) [sampling]   streams text, timing on stderr
//
// Common options: --dtype bf16|fp32, --device cpu|cuda, --threads N. Sampling: --max-tokens N
// --temperature T --top-k K --top-p P --seed S --stop STR (repeatable) --system TEXT.
#include <chrono>
#include <cstdio>
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

namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Args {
  std::string command, model;
  std::map<std::string, std::vector<std::string>> options;
  std::vector<std::string> flags;

  bool Has(const std::string& k) const { return options.count(k) > 0; }
  bool Flag(const std::string& k) const {
    return std::find(flags.begin(), flags.end(), k) != flags.end();
  }
  std::string Get(const std::string& k, const std::string& fallback = "") const {
    auto it = options.find(k);
    return it == options.end() ? fallback : it->second.back();
  }
};

const char* kUsage =
    "usage: sift-model info|tokenize|detokenize|logits|generate MODEL [options]\n"
    "  --text T | --prompt T | --chat MESSAGE [--system TEXT] | --ids 1,2,3\n"
    "  --no-special  --top-k K  --dtype bf16|fp32  --device cpu|cuda  --threads N\n"
    "  --max-tokens N  --temperature T  --top-p P  --seed S  --stop STR\n";

Args ParseArgs(int argc, char** argv) {
  static const std::vector<std::string> kFlags = {"--no-special", "--ignore-eos", "--help"};
  Args a;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0) {
      if (std::find(kFlags.begin(), kFlags.end(), s) != kFlags.end()) {
        a.flags.push_back(s);
      } else {
        SIFT_CHECK(i + 1 < argc, "option ", s, " needs a value");
        a.options[s].push_back(argv[++i]);
      }
    } else {
      positional.push_back(s);
    }
  }
  SIFT_CHECK(positional.size() == 2 || a.Flag("--help"), kUsage);
  if (positional.size() == 2) {
    a.command = positional[0];
    a.model = positional[1];
  }
  return a;
}

std::vector<sift::TokenId> ParseIds(const std::string& s) {
  std::vector<sift::TokenId> ids;
  std::string cleaned;
  for (char c : s) cleaned += (c == '[' || c == ']' || c == ',') ? ' ' : c;
  std::istringstream in(cleaned);
  long v;
  while (in >> v) ids.push_back(static_cast<sift::TokenId>(v));
  return ids;
}

// The prompt as ids: --ids, --chat (rendered with the model's chat template) or --text/--prompt.
std::vector<sift::TokenId> PromptIds(const sift::Model& model, const Args& a) {
  if (a.Has("--ids")) return ParseIds(a.Get("--ids"));
  const sift::Tokenizer& tok = model.tokenizer();
  if (a.Has("--chat")) {
    std::vector<sift::ChatMessage> messages;
    if (a.Has("--system")) messages.push_back({"system", a.Get("--system")});
    messages.push_back({"user", a.Get("--chat")});
    return tok.Encode(tok.chat_template().Render(messages, /*add_generation_prompt=*/true));
  }
  std::string text = a.Has("--text") ? a.Get("--text") : a.Get("--prompt");
  SIFT_CHECK(!text.empty(), "give --text, --prompt, --chat or --ids");
  std::vector<sift::TokenId> ids = tok.Encode(text, !a.Flag("--no-special"));
  if (tok.add_bos() && tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
  return ids;
}

int Info(const Args& a) {
  std::unique_ptr<sift::GgufFile> f = sift::GgufFile::Open(a.model);
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
  sift::ModelConfig c = sift::ModelConfig::FromGguf(*f);
  std::printf(
      "model: %s arch=%s layers=%lld hidden=%lld ff=%lld heads=%lld kv_heads=%lld head_dim=%lld "
      "ctx=%lld rope_theta=%g vocab=%lld tied=%d\n",
      c.name.c_str(), c.architecture.c_str(), (long long)c.num_layers, (long long)c.hidden_size,
      (long long)c.intermediate_size, (long long)c.num_heads, (long long)c.num_kv_heads,
      (long long)c.head_dim, (long long)c.context_length, c.rope_theta, (long long)c.vocab_size,
      c.tied_embeddings ? 1 : 0);
  return 0;
}

std::shared_ptr<const sift::Model> LoadModel(const Args& a) {
  sift::ModelOptions options;
  options.dtype = sift::ParseDtype(a.Get("--dtype", "bf16"));
  options.threads = std::stoi(a.Get("--threads", "0"));
  options.device = sift::ParseDevice(a.Get("--device", "cpu"));
  sift::ConfigureThreads(options.threads);
  return sift::Model::Load(a.model, options);
}

int Tokenize(const Args& a) {
  auto model = LoadModel(a);
  std::string text = a.Has("--text") ? a.Get("--text") : "";
  if (!a.Has("--text")) {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    text = ss.str();
  }
  nlohmann::json ids = model->tokenizer().Encode(text, !a.Flag("--no-special"));
  std::cout << ids.dump() << "\n";
  return 0;
}

int Detokenize(const Args& a) {
  auto model = LoadModel(a);
  std::string spec = a.Get("--ids");
  if (spec.empty()) {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    spec = ss.str();
  }
  std::cout << model->tokenizer().Decode(ParseIds(spec)) << "\n";
  return 0;
}

int Logits(const Args& a) {
  auto model = LoadModel(a);
  std::vector<sift::TokenId> ids = PromptIds(*model, a);
  sift::KvCache cache = model->NewCache();
  at::Tensor logits = model->Forward(ids, 0, cache);
  auto [values, indices] = logits.topk(std::stoi(a.Get("--top-k", "10")));
  nlohmann::json out;
  out["n_tokens"] = ids.size();
  out["dtype"] = sift::DtypeName(model->options().dtype);
  // top-k on the model's device; only the k winners come to the host.
  const std::vector<int64_t> top_ids = sift::HostInts(indices);
  const at::Tensor host_values = sift::ToHost(values);
  const float* v = host_values.data_ptr<float>();  // host: ToHost'd
  const std::vector<float> top_values(v, v + host_values.numel());
  out["top_ids"] = top_ids;
  out["top_logits"] = top_values;
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
  std::vector<sift::TokenId> ids = PromptIds(*model, a);
  SIFT_CHECK(static_cast<int64_t>(ids.size()) < model->config().context_length, "prompt of ",
             ids.size(), " tokens does not fit the model's context of ",
             model->config().context_length);

  sift::GenerationOptions g;
  g.max_tokens = std::stoll(a.Get("--max-tokens", "128"));
  g.sampling.temperature = std::stod(a.Get("--temperature", "0"));
  g.sampling.top_k = std::stoll(a.Get("--top-k", "0"));
  g.sampling.top_p = std::stod(a.Get("--top-p", "1"));
  g.sampling.seed = std::stoull(a.Get("--seed", "0"));
  g.ignore_eog = a.Flag("--ignore-eos");
  if (a.Has("--stop")) g.stop_strings = a.options.at("--stop");

  const auto t0 = Clock::now();
  sift::KvCache cache = model->NewCache();
  at::Tensor logits = model->Forward(ids, 0, cache);
  const double prefill_ms = MsSince(t0);
  sift::GenerationResult r = sift::Generate(
      *model, cache, logits, static_cast<int64_t>(ids.size()), g,
      [](const std::string& piece, sift::TokenId) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        return true;
      });
  std::printf("\n");
  const double n = static_cast<double>(r.tokens.size());
  std::fprintf(stderr,
               "[sift-model] load %.0f ms | prompt %zu tokens, prefill %.1f ms (%.0f tok/s) | "
               "%zu tokens generated in %.1f ms (%.1f ms/token) | finish=%s | kv %.2f MiB | %s\n",
               load_ms, ids.size(), prefill_ms, ids.size() / (prefill_ms / 1000.0),
               r.tokens.size(), r.decode_ms, n > 0 ? r.decode_ms / n : 0.0,
               sift::FinishReasonName(r.finish), cache.Bytes() / 1048576.0,
               sift::DtypeName(model->options().dtype));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sift::ConfigureThreadEnvironment(argv);
  try {
    Args a = ParseArgs(argc, argv);
    if (a.Flag("--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a.command == "info") return Info(a);
    if (a.command == "tokenize") return Tokenize(a);
    if (a.command == "detokenize") return Detokenize(a);
    if (a.command == "logits") return Logits(a);
    if (a.command == "generate") return Generate(a);
    std::fprintf(stderr, "unknown command '%s'\n%s", a.command.c_str(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sift-model: error: %s\n", e.what());
    return 1;
  }
}
