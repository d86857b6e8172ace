// Chat template detection and rendering for ChatML (with SmolLM2's default system prompt),
// Llama 3 and Mistral.
#include "sift/chat_template.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sift {
namespace {

// SmolLM2-Instruct's tokenizer.chat_template, verbatim (as in its tokenizer_config.json and GGUF).
const std::string kSmolLM2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

const char kSmolLMSystem[] = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

TEST(ChatTemplateTest, SmolLM2DefaultSystemIsExtractedAndInjected) {
  const ChatTemplate t = ChatTemplate::Detect(kSmolLM2Template, "<|im_start|>");
  EXPECT_EQ(t.format(), ChatFormat::kChatML);
  EXPECT_EQ(t.default_system(), kSmolLMSystem);
  EXPECT_EQ(t.Render({{"user", "What is 2+2?"}}, /*add_generation_prompt=*/true),
            "<|im_start|>system\n"
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\n"
            "What is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, ChatMLWithOwnSystemMessageAndMultipleTurns) {
  const ChatTemplate t = ChatTemplate::Detect(kSmolLM2Template, "");
  EXPECT_EQ(
      t.Render(
          {{"system", "Be brief."}, {"user", " hi "}, {"assistant", "Hello!"}, {"user", "Bye\n"}},
          /*add_generation_prompt=*/false),
      "<|im_start|>system\nBe brief.<|im_end|>\n"
      "<|im_start|>user\n hi <|im_end|>\n"
      "<|im_start|>assistant\nHello!<|im_end|>\n"
      "<|im_start|>user\nBye\n<|im_end|>\n");
  // The default is injected only before a first non-system message, never for no messages.
  EXPECT_EQ(t.Render({}, true), "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, ChatMLWithoutDefaultSystem) {
  const std::string plain =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\n' }}{% endif %}";
  const ChatTemplate t = ChatTemplate::Detect(plain, "");
  EXPECT_EQ(t.format(), ChatFormat::kChatML);
  EXPECT_EQ(t.default_system(), "");
  EXPECT_EQ(t.Render({{"user", "x"}}, true),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, QwenStyleEscapedDefaultSystemSkipsExpressions) {
  // A Qwen2.5-like template: the first "<|im_start|>system\n" is followed by an expression, the
  // default prompt is a later literal written with the Jinja escape "\n".
  const std::string qwen =
      "{%- if messages[0]['role'] == 'system' %}"
      "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
      "{%- else %}"
      "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
      "assistant.<|im_end|>\\n' }}"
      "{%- endif %}";
  const ChatTemplate t = ChatTemplate::Detect(qwen, "");
  EXPECT_EQ(t.format(), ChatFormat::kChatML);
  EXPECT_EQ(t.default_system(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
}

TEST(ChatTemplateTest, Llama3) {
  const std::string llama3 =
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
      "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
      "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
  const ChatTemplate t = ChatTemplate::Detect(llama3, "<|begin_of_text|>");
  EXPECT_EQ(t.format(), ChatFormat::kLlama3);
  EXPECT_EQ(t.Render({{"system", "Be brief."}, {"user", "  Hi there\n"}}, true),
            "<|begin_of_text|>"
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(t.Render({{"user", "a"}, {"assistant", "b"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\na<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nb<|eot_id|>");
  // Without a BOS text the Llama 3 default is used.
  EXPECT_EQ(ChatTemplate::Detect(llama3, "").Render({{"user", "a"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\na<|eot_id|>");
}

TEST(ChatTemplateTest, Mistral) {
  const std::string mistral =
      "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
      "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' "
      "%}{{ message['content'] + eos_token}}{% endif %}{% endfor %}";
  const ChatTemplate t = ChatTemplate::Detect(mistral, "<s>");
  EXPECT_EQ(t.format(), ChatFormat::kMistral);
  EXPECT_EQ(t.Render({{"user", "Hi"}, {"assistant", "Hello"}, {"user", "More"}}, true),
            "<s>[INST] Hi [/INST]Hello</s>[INST] More [/INST]");
  EXPECT_EQ(t.Render({{"system", "Be brief."}, {"user", "Hi"}}, true),
            "<s>[INST] Be brief.\n\nHi [/INST]");
  EXPECT_EQ(t.Render({{"system", "S"}}, true), "<s>[INST] S [/INST]");
}

TEST(ChatTemplateTest, UnknownTemplateFallsBackToPlainChatML) {
  const ChatTemplate t = ChatTemplate::Detect("{{ messages }}", "<s>");
  EXPECT_EQ(t.format(), ChatFormat::kChatML);
  EXPECT_EQ(t.default_system(), "");
  EXPECT_EQ(ChatTemplate::Detect("", "").format(), ChatFormat::kChatML);
  EXPECT_STREQ(ChatFormatName(ChatFormat::kChatML), "chatml");
  EXPECT_STREQ(ChatFormatName(ChatFormat::kLlama3), "llama3");
  EXPECT_STREQ(ChatFormatName(ChatFormat::kMistral), "mistral");
}

}  // namespace
}  // namespace sift
