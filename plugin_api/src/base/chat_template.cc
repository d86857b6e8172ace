#include "sift/chat_template.h"

#include <utility>

#include "unicode.h"

namespace sift {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";

// Reads a hard-coded default system prompt out of a ChatML Jinja template: the text between
// "<|im_start|>system\n" (a real newline or the escape "\n") and the next "<|im_end|>", when it
// is plain literal text (no quote, brace: not an expression such as message['content']).
std::string ExtractDefaultSystem(std::string_view jinja) {
  for (const std::string_view marker :
       {std::string_view("<|im_start|>system\n"), std::string_view("<|im_start|>system\\n")}) {
    for (size_t pos = jinja.find(marker); pos != std::string_view::npos;
         pos = jinja.find(marker, pos + 1)) {
      const size_t begin = pos + marker.size();
      const size_t end = jinja.find(kImEnd, begin);
      if (end == std::string_view::npos) break;
      const std::string_view literal = jinja.substr(begin, end - begin);
      if (literal.empty() || literal.find_first_of("'\"{}") != std::string_view::npos) continue;
      std::string text;  // undo Jinja string escapes
      for (size_t i = 0; i < literal.size(); ++i) {
        if (literal[i] == '\\' && i + 1 < literal.size()) {
          const char c = literal[++i];
          text.push_back(c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c);
        } else {
          text.push_back(literal[i]);
        }
      }
      return text;
    }
  }
  return "";
}

// Jinja's `trim` (Python str.strip()): Unicode White_Space plus U+001C..U+001F at both ends.
std::string_view Trim(std::string_view s) {
  const auto is_space_at = [&](size_t pos, size_t* length) {
    uint32_t cp;
    *length = unicode::DecodeUtf8At(s, pos, &cp);
    return *length > 0 && (unicode::IsWhitespace(cp) || (cp >= 0x1C && cp <= 0x1F));
  };
  size_t begin = 0;
  size_t length;
  while (begin < s.size() && is_space_at(begin, &length)) begin += length;
  size_t end = s.size();
  while (end > begin) {
    size_t start = end - 1;  // back up to the lead byte of the last code point
    while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    if (!is_space_at(start, &length) || start + length != end) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

std::string RenderChatML(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                         const std::string& default_system) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0 && !default_system.empty() && messages[0].role != "system") {
      out.append(kImStart).append("system\n").append(default_system).append(kImEnd).append("\n");
    }
    out.append(kImStart).append(messages[i].role).append("\n");
    out.append(messages[i].content).append(kImEnd).append("\n");
  }
  if (add_generation_prompt) out.append(kImStart).append("assistant\n");
  return out;
}

std::string RenderLlama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                         const std::string& bos_text) {
  std::string out;
  if (!messages.empty()) out.append(bos_text.empty() ? "<|begin_of_text|>" : bos_text);
  for (const ChatMessage& m : messages) {
    out.append("<|start_header_id|>").append(m.role).append("<|end_header_id|>\n\n");
    out.append(Trim(m.content)).append("<|eot_id|>");
  }
  if (add_generation_prompt) out.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return out;
}

std::string RenderMistral(const std::vector<ChatMessage>& messages, const std::string& bos_text) {
  std::string out = bos_text.empty() ? "<s>" : bos_text;
  std::string system;  // system text waiting for the next user turn
  const auto user_turn = [&](const std::string& content) {
    out.append("[INST] ");
    if (!system.empty()) {
      out.append(system);
      if (!content.empty()) out.append("\n\n");
      system.clear();
    }
    out.append(content).append(" [/INST]");
  };
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      if (!system.empty()) system.append("\n\n");
      system.append(m.content);
    } else if (m.role == "assistant") {
      if (!system.empty()) user_turn("");
      out.append(m.content).append("</s>");
    } else {
      user_turn(m.content);
    }
  }
  if (!system.empty()) user_turn("");
  return out;
}

}  // namespace

const char* ChatFormatName(ChatFormat format) {
  switch (format) {
    case ChatFormat::kChatML:
      return "chatml";
    case ChatFormat::kLlama3:
      return "llama3";
    case ChatFormat::kMistral:
      return "mistral";
  }
  return "?";
}

ChatTemplate ChatTemplate::Detect(std::string_view jinja, std::string_view bos_text) {
  if (jinja.find(kImStart) != std::string_view::npos) {
    return ChatTemplate(ChatFormat::kChatML, ExtractDefaultSystem(jinja));
  }
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) {
    return ChatTemplate(ChatFormat::kLlama3, "", std::string(bos_text));
  }
  if (jinja.find("[INST]") != std::string_view::npos) {
    return ChatTemplate(ChatFormat::kMistral, "", std::string(bos_text));
  }
  return ChatTemplate();
}

bool ChatTemplate::Recognizes(std::string_view jinja) {
  return jinja.find(kImStart) != std::string_view::npos ||
         jinja.find("<|start_header_id|>") != std::string_view::npos ||
         jinja.find("[INST]") != std::string_view::npos;
}

std::string ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) const {
  switch (format_) {
    case ChatFormat::kChatML:
      return RenderChatML(messages, add_generation_prompt, default_system_);
    case ChatFormat::kLlama3:
      return RenderLlama3(messages, add_generation_prompt, bos_text_);
    case ChatFormat::kMistral:
      return RenderMistral(messages, bos_text_);
  }
  return "";
}

}  // namespace sift
