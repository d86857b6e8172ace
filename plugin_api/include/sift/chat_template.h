// Chat templates: ChatML (SmolLM2, Qwen2), Llama 3 and Mistral, rendered natively (no Jinja).
//
// The format is detected from the GGUF `tokenizer.chat_template` string. The SmolLM2 template
// injects a default system prompt when the first message is not a system message; the detected
// template remembers that text and reproduces it exactly (engine-specs §3.7).
#ifndef SIFT_CHAT_TEMPLATE_H_
#define SIFT_CHAT_TEMPLATE_H_

#include <string>
#include <string_view>
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
      : format_(format), default_system_(std::move(default_system)), bos_text_(std::move(bos_text)) {}

  // Detects the format from a Jinja template string. Unknown or empty templates give ChatML
  // without a default system prompt. bos_text is the BOS token's text (Llama 3, Mistral).
  static ChatTemplate Detect(std::string_view jinja, std::string_view bos_text);

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
