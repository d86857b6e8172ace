// Chat templates: ChatML (SmolLM2, Qwen2), Llama 3 and Mistral, rendered natively (no Jinja).
//
// The format is detected from the GGUF `tokenizer.chat_template` string. The SmolLM2 template
// injects a default system prompt when the first message is not a system message; the detected
// template remembers that text and reproduces it exactly (the template string of
// SmolLM2-Instruct's tokenizer_config.json, verbatim in tests/unit/chat_template_test.cc).
//
// Exact rendering rules (roles and contents are copied verbatim unless stated):
//   ChatML:  for each message "<|im_start|>{role}\n{content}<|im_end|>\n"; if there is a default
//            system prompt and messages[0].role != "system", it is first rendered as a system
//            message (nothing is injected for an empty list). Generation prompt:
//            "<|im_start|>assistant\n". No BOS.
//   Llama 3: bos_text (default "<|begin_of_text|>") if there is at least one message, then per
//            message "<|start_header_id|>{role}<|end_header_id|>\n\n{trimmed content}<|eot_id|>"
//            (content trimmed as Jinja `trim`: White_Space and U+001C..U+001F at both ends).
//            Generation prompt: "<|start_header_id|>assistant<|end_header_id|>\n\n". Llama 3.1's
//            date/tools system header is not reproduced.
//   Mistral: bos_text (default "<s>"); user (or any other non-system role) ->
//            "[INST] {content} [/INST]"; assistant -> "{content}</s>". System contents (joined by
//            "\n\n") are prepended to the next user content as "{system}\n\n{user}"; a system
//            text with no following user message becomes its own "[INST] {system} [/INST]" turn.
//            The generation prompt adds nothing (the prompt already ends with "[/INST]").
//            Llama 2's <<SYS>> form is not reproduced.
//
// THREADING: immutable value type; safe from many threads.
// ERRORS:    none; unknown templates fall back to ChatML.
#ifndef SIFT_CHAT_TEMPLATE_H_
#define SIFT_CHAT_TEMPLATE_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sift {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFormat { kChatML, kLlama3, kMistral };
const char* ChatFormatName(ChatFormat format);

class ChatTemplate {
 public:
  ChatTemplate() = default;
  explicit ChatTemplate(ChatFormat format, std::string default_system = "",
                        std::string bos_text = "")
      : format_(format),
        default_system_(std::move(default_system)),
        bos_text_(std::move(bos_text)) {}

  // Detects the format from a Jinja template string: contains "<|im_start|>" -> ChatML,
  // else "<|start_header_id|>" -> Llama 3, else "[INST]" -> Mistral; unknown or empty
  // templates give ChatML without a default system prompt. For ChatML, the default system
  // prompt is the literal text between "<|im_start|>system\n" (real newline or the Jinja
  // escape) and the next "<|im_end|>", taken from the first such span that contains no quote
  // or brace (i.e. is not an expression like message['content']); Jinja escapes are undone.
  // bos_text is the BOS token's text (Llama 3, Mistral).
  static ChatTemplate Detect(std::string_view jinja, std::string_view bos_text);
  // Whether Detect finds one of the three formats in `jinja` (false for "" and for unknown
  // templates, which Detect renders as ChatML). The tokenizer.json loader refuses the others.
  static bool Recognizes(std::string_view jinja);

  // Renders messages to prompt text (special tokens as text: encode with parse_special).
  std::string Render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  ChatFormat format() const { return format_; }
  const std::string& default_system() const { return default_system_; }

 private:
  ChatFormat format_ = ChatFormat::kChatML;
  std::string default_system_;
  std::string bos_text_;
};

}  // namespace sift

#endif  // SIFT_CHAT_TEMPLATE_H_
