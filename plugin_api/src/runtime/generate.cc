#include "sift/generate.h"

#include <algorithm>
#include <chrono>

#include "sift/error.h"

namespace sift {
namespace {

// Length of the longest suffix of `text` that is a proper prefix of some stop string.
size_t HeldBackLength(const std::string& text, const std::vector<std::string>& stops) {
  size_t held = 0;
  for (const std::string& s : stops) {
    for (size_t len = std::min(text.size(), s.size() - 1); len > held; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        held = len;
        break;
      }
    }
  }
  return held;
}

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kContextFull:
      return "context_full";
  }
  return "unknown";
}

GenerationResult Generate(const Model& model, KvCache& cache, const at::Tensor& first_logits,
                          int64_t next_position, const GenerationOptions& options,
                          const StreamCallback& on_piece) {
  SIFT_CHECK(model.has_tokenizer(), "Generate: the model has no tokenizer");
  const Tokenizer& tok = model.tokenizer();
  for (const std::string& s : options.stop_strings) {
    SIFT_CHECK(!s.empty(), "Generate: empty stop string");
  }
  GenerationResult result;
  Sampler sampler(options.sampling);
  StreamingDetokenizer detok(tok, /*skip_special=*/true);
  std::string text;    // everything decoded so far
  size_t emitted = 0;  // bytes of `text` already handed to the callback
  at::Tensor logits = first_logits;
  int64_t position = next_position;
  // Room for every token this call may append, so decode steps never reallocate the cache.
  for (int64_t l = 0; l < cache.num_layers(); ++l) cache.Reserve(l, options.max_tokens);
  bool stopped_by_string = false;
  const auto start = std::chrono::steady_clock::now();

  auto emit = [&](size_t upto, TokenId token) {
    std::string piece = text.substr(emitted, upto - emitted);
    emitted = upto;
    return on_piece ? on_piece(piece, token) : true;
  };

  while (static_cast<int64_t>(result.tokens.size()) < options.max_tokens) {
    const TokenId token = sampler.Sample(logits);
    const bool is_stop_token = std::find(options.stop_tokens.begin(), options.stop_tokens.end(),
                                         token) != options.stop_tokens.end();
    if (is_stop_token || (!options.ignore_eog && tok.IsEog(token))) {
      result.finish = FinishReason::kStop;
      break;
    }
    result.tokens.push_back(token);
    text += detok.Push(token);

    // Stop strings: cut at the first occurrence, which may span earlier pieces' held-back text.
    size_t cut = std::string::npos;
    for (const std::string& s : options.stop_strings) {
      size_t at = text.find(s, emitted > s.size() ? emitted - s.size() : 0);
      if (at != std::string::npos) cut = std::min(cut, at);
    }
    if (cut != std::string::npos) {
      text.resize(cut);
      emit(std::max(cut, emitted), token);
      result.finish = FinishReason::kStop;
      stopped_by_string = true;
      break;
    }
    const size_t safe = text.size() - HeldBackLength(text, options.stop_strings);
    if (!emit(std::max(safe, emitted), token)) {
      result.finish = FinishReason::kCancelled;
      break;
    }
    if (static_cast<int64_t>(result.tokens.size()) >= options.max_tokens) break;
    if (position >= model.config().context_length) {
      result.finish = FinishReason::kContextFull;
      break;
    }
    logits = model.Forward({token}, position, cache);
    ++position;
  }
  if (!stopped_by_string && result.finish != FinishReason::kCancelled) {
    text += detok.Flush();
    emit(text.size(), -1);
  }
  result.text = text;
  result.decode_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace sift
