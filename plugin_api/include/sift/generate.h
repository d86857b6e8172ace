// The decode loop: sample, stream text, stop on tokens, strings or a callback's say-so.
//
// Generate() continues from a prefilled cache: `first_logits` are the logits after the last
// prompt token and `next_position` is the RoPE position of the first generated token (the
// uncompressed prompt length, even when the cache was compressed).
//
// Stop strings never leak: text that could be the beginning of a stop string is held back until
// it is known not to be one. The returned text excludes the stop string.
//
// THREADING: Generate runs on the caller's thread; the callback is invoked on it.
#ifndef SIFT_GENERATE_H_
#define SIFT_GENERATE_H_

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sift/model.h"
#include "sift/sampler.h"

namespace sift {

struct GenerationOptions {
  SamplingOptions sampling;
  int64_t max_tokens = 128;
  std::vector<std::string> stop_strings;
  std::vector<TokenId> stop_tokens;  // in addition to the model's end-of-generation tokens
  bool ignore_eog = false;           // keep going past EOS (benchmarks)
};

enum class FinishReason { kLength, kStop, kCancelled, kContextFull };
const char* FinishReasonName(FinishReason reason);

struct GenerationResult {
  std::vector<TokenId> tokens;  // generated ids (a stop token is not included)
  std::string text;
  FinishReason finish = FinishReason::kLength;
  double decode_ms = 0;  // time spent generating after the first token was sampled
};

// Called with each newly safe piece of text (possibly "") and the token that produced it.
// Return false to cancel.
using StreamCallback = std::function<bool(const std::string& piece, TokenId token)>;

// What one Generation::Next did.
struct GenerationStep {
  TokenId token = -1;    // the token sampled and appended (-1: none, the generation ended)
  bool emit = false;     // hand `piece` (possibly "") and `token` to the stream callback
  bool cut = false;      // the piece ends at a stop string: the callback's answer is ignored
  std::string piece;     // text that became safe to send
  bool feed = false;     // run `token` at `position` through the model, then call Next again
  int64_t position = 0;  // RoPE position of `token` when feed is set
};

// One request's generation, a token at a time: sampling, end-of-generation and stop tokens, stop
// strings (held-back text) and detokenisation, without the forward. Generate() drives one with
// Model::Forward; the batch engine (sift/batch_engine.h) drives many with Model::DecodeStep. The
// caller's part of the contract, in order: Next(logits); if emit, call the stream callback and,
// when it returns false and !cut, Cancel(); if feed, compute the logits of token at position and
// repeat; else (or after Cancel) Flush() gives the held-back rest to send with token -1, then
// TakeResult().
//
// THREADING: one thread at a time (not necessarily the constructing one).
class Generation {
 public:
  // `next_position`: the RoPE position of the first generated token. Throws sift::Error when the
  // model has no tokenizer or a stop string is empty.
  Generation(const Model& model, const GenerationOptions& options, int64_t next_position);

  // Samples the token that follows `logits` ([vocab]); see GenerationStep.
  GenerationStep Next(const at::Tensor& logits);
  // True when Next() takes the argmax (temperature 0, ties to the lowest id), which a caller may
  // then compute for several rows in one host read and hand to NextChosen() (BatchEngine).
  bool greedy() const { return options_.sampling.temperature == 0; }
  // Next() with the token already chosen (the argmax of its logits, for a greedy generation).
  GenerationStep NextChosen(TokenId token);
  // The stream callback refused a piece: the generation ends as cancelled.
  void Cancel();
  // Once ended: the rest of the text to send with token -1, or nothing after a stop string or a
  // cancellation. Call at most once.
  std::optional<std::string> Flush();
  bool done() const { return done_; }
  // The result (text, tokens, finish reason, decode_ms since construction).
  GenerationResult TakeResult();

 private:
  std::string TakePiece(size_t upto);
  // Next()'s work once `token` is known.
  GenerationStep Accept(TokenId token);
  const Model& model_;
  const GenerationOptions& options_;
  Sampler sampler_;
  StreamingDetokenizer detok_;
  std::string text_;    // everything decoded so far
  size_t emitted_ = 0;  // bytes of text_ already handed out
  int64_t position_;    // RoPE position of the next token to feed
  bool done_ = false;
  bool stopped_by_string_ = false;
  GenerationResult result_;
  std::chrono::steady_clock::time_point start_;
};

GenerationResult Generate(const Model& model, KvCache& cache, const at::Tensor& first_logits,
                          int64_t next_position, const GenerationOptions& options,
                          const StreamCallback& on_piece = nullptr);

}  // namespace sift

#endif  // SIFT_GENERATE_H_
