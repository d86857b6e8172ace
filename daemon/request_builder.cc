#include "daemon/request_builder.h"

#include <algorithm>

namespace sift::daemon {
namespace {

// Marks where the question goes when the template is rendered once to find the split point.
// Control characters that no template trims or escapes.
constexpr char kSentinel[] = "\x01\x02sift-question\x02\x01";

std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

int64_t TailBegin(int64_t n, int64_t question_tokens) {
  return n - std::min(n, std::max<int64_t>(0, question_tokens));
}

// Chat input: renders `messages`, whose last content is prefix + question, and splits the
// token ids where the question begins.
void TokenizeChat(const Tokenizer& tokenizer, std::vector<ChatMessage> messages,
                  const std::string& prefix, const std::string& question, int64_t question_tokens,
                  TokenizedPrompt* out) {
  const ChatTemplate& chat = tokenizer.chat_template();
  messages.back().content = prefix + kSentinel;
  const std::string marked = chat.Render(messages, /*add_generation_prompt=*/true);
  messages.back().content = prefix + question;
  const std::string full = chat.Render(messages, /*add_generation_prompt=*/true);
  const size_t at = marked.find(kSentinel);
  if (at != std::string::npos) {
    const std::string head = marked.substr(0, at);
    const std::string tail = marked.substr(at + sizeof(kSentinel) - 1);
    if (full.size() == head.size() + question.size() + tail.size() &&
        full.compare(0, head.size(), head) == 0 &&
        full.compare(head.size(), question.size(), question) == 0) {
      std::vector<TokenId> first = tokenizer.Encode(head, /*parse_special=*/true);
      out->question_begin = static_cast<int64_t>(first.size());
      out->tokens = Concat(std::move(first), tokenizer.Encode(question + tail, true));
      out->exact_split = true;
      return;
    }
  }
  out->tokens = tokenizer.Encode(full, true);
  out->question_begin = TailBegin(static_cast<int64_t>(out->tokens.size()), question_tokens);
  out->exact_split = false;
}

}  // namespace

Status TokenizePrompt(const Tokenizer& tokenizer, const GenerateRequest& request,
                      int64_t default_question_tokens, TokenizedPrompt* out,
                      nlohmann::json* details) {
  const int64_t q =
      request.question_tokens >= 0 ? request.question_tokens : default_question_tokens;
  *out = TokenizedPrompt();
  switch (request.input) {
    case InputKind::kContextQuestion: {
      std::vector<ChatMessage> messages;
      if (!request.system.empty()) messages.push_back({"system", request.system});
      messages.push_back({"user", ""});
      const std::string prefix = request.context.empty() ? "" : request.context + "\n\n";
      TokenizeChat(tokenizer, std::move(messages), prefix, request.question, q, out);
      break;
    }
    case InputKind::kMessages: {
      std::vector<ChatMessage> messages;
      for (const ChatTurn& t : request.messages) messages.push_back({t.role, t.content});
      const std::string question = messages.back().content;
      TokenizeChat(tokenizer, std::move(messages), "", question, q, out);
      break;
    }
    case InputKind::kPrompt: {
      out->tokens = tokenizer.Encode(request.prompt, /*parse_special=*/true);
      const TokenId bos = tokenizer.bos_id();
      if (tokenizer.add_bos() && bos >= 0 && (out->tokens.empty() || out->tokens[0] != bos)) {
        out->tokens.insert(out->tokens.begin(), bos);
      }
      out->question_begin = TailBegin(static_cast<int64_t>(out->tokens.size()), q);
      break;
    }
    case InputKind::kTokens: {
      const int64_t vocab = tokenizer.vocab_size();
      for (size_t i = 0; i < request.tokens.size(); ++i) {
        if (request.tokens[i] < 0 || request.tokens[i] >= vocab) {
          *details = {{"index", i}, {"token", request.tokens[i]}, {"vocab_size", vocab}};
          return Status(StatusCode::kInvalidArgument, "bad_token",
                        "token id " + std::to_string(request.tokens[i]) + " at index " +
                            std::to_string(i) + " is outside the vocabulary (size " +
                            std::to_string(vocab) + ")");
        }
      }
      out->tokens.assign(request.tokens.begin(), request.tokens.end());
      out->question_begin = TailBegin(static_cast<int64_t>(out->tokens.size()), q);
      break;
    }
  }
  if (out->tokens.empty()) {
    return Status(StatusCode::kInvalidArgument, "empty_prompt", "the prompt has no tokens");
  }
  return Status::Ok();
}

Status BuildRequestState(const Model& model, const GenerateRequest& request,
                         const BuildOptions& options, RequestState* state, bool* max_tokens_clamped,
                         nlohmann::json* details) {
  TokenizedPrompt prompt;
  SIFT_RETURN_IF_ERROR(
      TokenizePrompt(model.tokenizer(), request, options.question_tokens, &prompt, details));
  const int64_t n = static_cast<int64_t>(prompt.tokens.size());
  const int64_t n_ctx = options.n_ctx > 0 ? options.n_ctx : model.config().context_length;
  if (n >= n_ctx) {
    *details = {{"n_prompt_tokens", n}, {"n_ctx", n_ctx}};
    return Status(StatusCode::kInvalidArgument, "prompt_too_long",
                  "the prompt has " + std::to_string(n) + " tokens but the context holds " +
                      std::to_string(n_ctx) + " (at least one must remain for generation)");
  }
  state->id = request.id;
  state->tokens = std::move(prompt.tokens);
  state->question_begin = prompt.question_begin;
  state->prompt_length = n;

  GenerationOptions& g = state->generation;
  g.sampling.temperature = request.temperature;
  g.sampling.top_k = request.top_k;
  g.sampling.top_p = request.top_p;
  g.sampling.seed = request.seed;
  g.max_tokens = std::min(request.max_tokens, n_ctx - n);
  *max_tokens_clamped = g.max_tokens < request.max_tokens;
  g.stop_strings = request.stop;
  g.stop_tokens.assign(request.stop_token_ids.begin(), request.stop_token_ids.end());
  g.ignore_eog = request.ignore_eos;
  return Status::Ok();
}

}  // namespace sift::daemon
