#include "prompt.h"

#include <algorithm>
#include <string>

#include "daemon/protocol.h"
#include "daemon/request_builder.h"
#include "sift/error.h"

namespace sift::layer_scan {
namespace {

// Token range covering the bytes [b0, b1) of the concatenated token bytes.
void SpanOf(const std::vector<int64_t>& starts, int64_t total, int64_t b0, int64_t b1,
            int64_t* begin, int64_t* end) {
  const auto first = std::upper_bound(starts.begin(), starts.end(), b0) - starts.begin() - 1;
  const auto last = std::lower_bound(starts.begin(), starts.end(), b1) - starts.begin();
  *begin = std::max<int64_t>(0, first);
  *end = std::min<int64_t>(total, last);
}

}  // namespace

ScanPrompt BuildPrompt(const Tokenizer& tokenizer, const bench::TaskOptions& options,
                       int64_t index) {
  ScanPrompt p;
  p.sample = bench::MakeSample(options, tokenizer, index);
  daemon::GenerateRequest request;
  request.input = daemon::InputKind::kContextQuestion;
  request.context = p.sample.context;
  request.question = p.sample.question;
  daemon::TokenizedPrompt tokenized;
  nlohmann::json details;
  const Status status = daemon::TokenizePrompt(tokenizer, request, 32, &tokenized, &details);
  SIFT_CHECK(status.ok(), "layer scan: cannot tokenise sample ", p.sample.id, ": ",
             status.message());
  p.tokens = std::move(tokenized.tokens);
  p.question_begin = tokenized.question_begin;

  std::string text;
  std::vector<int64_t> starts;
  for (TokenId id : p.tokens) {
    starts.push_back(static_cast<int64_t>(text.size()));
    text += tokenizer.TokenBytes(id);
  }
  const int64_t n = static_cast<int64_t>(p.tokens.size());
  if (!p.sample.needles.empty()) {
    const std::string& needle = p.sample.needles.front();
    const size_t at = text.find(needle);
    if (at != std::string::npos) {
      SpanOf(starts, n, at, at + needle.size(), &p.needle_begin, &p.needle_end);
      for (const std::string& answer : p.sample.answers) {
        const size_t in = needle.find(answer);
        if (in == std::string::npos) continue;
        SpanOf(starts, n, at + in, at + in + answer.size(), &p.answer_begin, &p.answer_end);
        break;
      }
    }
  }
  return p;
}

double Coverage(const std::vector<int64_t>& kept, int64_t begin, int64_t end) {
  if (begin < 0 || end <= begin) return 0;
  const auto lo = std::lower_bound(kept.begin(), kept.end(), begin);
  const auto hi = std::lower_bound(kept.begin(), kept.end(), end);
  return static_cast<double>(hi - lo) / static_cast<double>(end - begin);
}

}  // namespace sift::layer_scan
