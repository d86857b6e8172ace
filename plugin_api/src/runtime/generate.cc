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

Generation::Generation(const Model& model, const GenerationOptions& options, int64_t next_position)
    : model_(model),
      options_(options),
      sampler_(options.sampling),
      detok_(model.tokenizer(), /*skip_special=*/true),
      position_(next_position),
      start_(std::chrono::steady_clock::now()) {
  for (const std::string& s : options.stop_strings) {
    SIFT_CHECK(!s.empty(), "Generate: empty stop string");
  }
}

std::string Generation::TakePiece(size_t upto) {
  std::string piece = text_.substr(emitted_, upto - emitted_);
  emitted_ = upto;
  return piece;
}

GenerationStep Generation::Next(const at::Tensor& logits) {
  if (done_) return {};
  if (static_cast<int64_t>(result_.tokens.size()) >= options_.max_tokens) {
    done_ = true;  // max_tokens = 0: nothing to sample
    return {};
  }
  return Accept(sampler_.Sample(logits));
}

GenerationStep Generation::NextChosen(TokenId token) {
  SIFT_CHECK(greedy(), "Generation::NextChosen: the generation samples (temperature > 0)");
  if (done_) return {};
  if (static_cast<int64_t>(result_.tokens.size()) >= options_.max_tokens) {
    done_ = true;
    return {};
  }
  return Accept(token);
}

GenerationStep Generation::Accept(TokenId token) {
  GenerationStep step;
  const Tokenizer& tok = model_.tokenizer();
  const bool is_stop_token = std::find(options_.stop_tokens.begin(), options_.stop_tokens.end(),
                                       token) != options_.stop_tokens.end();
  if (is_stop_token || (!options_.ignore_eog && tok.IsEog(token))) {
    result_.finish = FinishReason::kStop;
    done_ = true;
    return step;
  }
  result_.tokens.push_back(token);
  text_ += detok_.Push(token);
  step.token = token;
  step.emit = true;

  // Stop strings: cut at the first occurrence, which may span earlier pieces' held-back text.
  size_t cut = std::string::npos;
  for (const std::string& s : options_.stop_strings) {
    size_t at = text_.find(s, emitted_ > s.size() ? emitted_ - s.size() : 0);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    text_.resize(cut);
    step.piece = TakePiece(std::max(cut, emitted_));
    step.cut = true;
    result_.finish = FinishReason::kStop;
    stopped_by_string_ = true;
    done_ = true;
    return step;
  }
  const size_t safe = text_.size() - HeldBackLength(text_, options_.stop_strings);
  step.piece = TakePiece(std::max(safe, emitted_));
  if (static_cast<int64_t>(result_.tokens.size()) >= options_.max_tokens) {
    done_ = true;
  } else if (position_ >= model_.config().context_length) {
    result_.finish = FinishReason::kContextFull;
    done_ = true;
  } else {
    step.feed = true;
    step.position = position_++;
  }
  return step;
}

void Generation::Cancel() {
  result_.finish = FinishReason::kCancelled;
  done_ = true;
}

std::optional<std::string> Generation::Flush() {
  if (stopped_by_string_ || result_.finish == FinishReason::kCancelled) return std::nullopt;
  text_ += detok_.Flush();
  return TakePiece(text_.size());
}

GenerationResult Generation::TakeResult() {
  result_.text = text_;
  result_.decode_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  return std::move(result_);
}

GenerationResult Generate(const Model& model, KvCache& cache, const at::Tensor& first_logits,
                          int64_t next_position, const GenerationOptions& options,
                          const StreamCallback& on_piece) {
  SIFT_CHECK(model.has_tokenizer(), "Generate: the model has no tokenizer");
  Generation generation(model, options, next_position);
  // Room for every token this call may append, so decode steps never reallocate the cache.
  for (int64_t l = 0; l < cache.num_layers(); ++l) cache.Reserve(l, options.max_tokens);
  at::Tensor logits = first_logits;
  DecodeBuffers buffers;  // every step's, at the same addresses (logits: sampled before reuse)
  while (!generation.done()) {
    GenerationStep step = generation.Next(logits);
    if (step.emit && on_piece && !on_piece(step.piece, step.token) && !step.cut) {
      generation.Cancel();
      break;
    }
    if (!step.feed) break;
    // The batch's decode step with one row: the same logits as a one-token Forward (bit for bit
    // on the CPU, tests/model/batch_engine_test.cc), without its per-layer operators.
    logits = model.DecodeStep({step.token}, {step.position}, {&cache}, {}, &buffers)[0];
  }
  if (std::optional<std::string> rest = generation.Flush(); rest && on_piece) {
    on_piece(*rest, -1);
  }
  return generation.TakeResult();
}

}  // namespace sift
