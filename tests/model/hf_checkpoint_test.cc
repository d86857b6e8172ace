// Hugging Face checkpoint directories served by sift.
//
// 1. Real directories: tools/make_reference_fixtures.py --export-hf has transformers load the
//    project's GGUF files (models/<name>.gguf, $SIFT_MODEL and $SIFT_MODEL_QWEN) and write them
//    with save_pretrained (fp32 safetensors, config.json with rope_parameters, tokenizer.json,
//    tokenizer_config.json, chat_template.jinja) to models/hf/<name>/ (or
//    $SIFT_HF_EXPORTS/<name>/). sift on that directory must match sift on the GGUF: the config,
//    the ids of the whole reference corpus (which also equal the committed Hugging Face ids), the
//    chat rendering, the logits and siftd's greedy answer. Skipped, saying
//    how to make it, when the directory is absent (CI does not make it: it needs the ~3 GB
//    reference Python environment).
//    Tolerance for the logits: both models hold the same fp32 weight values (transformers' GGUF
//    dequantisation, which the fixture script checks against an independent one, equals sift's;
//    the tensors are then stored losslessly as F32), so the logits agree to rounding: the GGUF
//    side multiplies by the GGUF blocks (WeightFormat::kNative), the directory by dense fp32
//    matrices. Measured max difference over all logits: 3.3e-5 (SmolLM2), 1.1e-5 (Qwen);
//    kSameWeightsTol = 1e-4 on logits of magnitude 10-30 catches any real difference (a wrong
//    rope_theta moves them by units).
// 2. siftd on a tiny HF directory (tests/support/safetensors_writer.h): refused at start, with a
//    clear error, when tokenizer.json is missing (it used to crash on the first request); with a
//    tokenizer.json it starts and serves a request.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sift/generate.h"
#include "sift/model.h"
#include "support/safetensors_writer.h"
#include "support/siftd_process.h"
#include "support/temp_dir.h"

namespace sift {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kSameWeightsTol = 1e-4;
constexpr double kReferenceTol = 2e-3;  // model_reference_test.cc's fp32 tolerance

json Fixture(const std::string& dir, const std::string& name) {
  std::ifstream in(std::string(SIFT_SOURCE_DIR) + "/tests/fixtures/reference/" + dir + name);
  if (!in) {
    ADD_FAILURE() << "missing fixture " << dir << name;
    return json::object();
  }
  return json::parse(in);
}

std::string RunCommand(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

// ---- 1. real exported directories ---------------------------------------------------------

struct Exported {
  const char* env;          // the GGUF's variable
  const char* key;          // make_reference_fixtures.py --model
  const char* fixture_dir;  // under tests/fixtures/reference/
};

class HfExportTest : public ::testing::TestWithParam<Exported> {
 protected:
  void SetUp() override {
    const char* gguf = std::getenv(GetParam().env);
    if (gguf == nullptr || *gguf == '\0') GTEST_SKIP() << GetParam().env << " is not set";
    gguf_ = gguf;
    // $SIFT_HF_EXPORTS/<GGUF stem>, by default models/hf/<GGUF stem> next to the GGUF.
    const char* exports = std::getenv("SIFT_HF_EXPORTS");
    const fs::path root = exports != nullptr && *exports != '\0'
                              ? fs::path(exports)
                              : fs::path(gguf_).parent_path() / "hf";
    dir_ = (root / fs::path(gguf_).stem()).string();
    if (!fs::exists(fs::path(dir_) / "config.json")) {
      GTEST_SKIP() << "no Hugging Face export at " << dir_
                   << "; make it with: tools/.venv-ref/bin/python tools/make_reference_fixtures.py"
                   << " --model " << GetParam().key << " --export-hf " << dir_ << " --no-fixtures";
    }
  }
  // Both models in fp32, loaded once per process.
  std::shared_ptr<const Model> Load(const std::string& path) {
    static std::map<std::string, std::shared_ptr<const Model>> cache;
    auto& slot = cache[path];
    if (!slot) {
      ConfigureThreads(0);
      ModelOptions o;
      o.dtype = at::kFloat;
      slot = Model::Load(path, o);
    }
    return slot;
  }
  std::string gguf_, dir_;
};

TEST_P(HfExportTest, ConfigMatchesTheGguf) {
  const ModelConfig a = Load(gguf_)->config();
  const ModelConfig b = Load(dir_)->config();
  EXPECT_EQ(b.architecture, a.architecture);
  EXPECT_EQ(b.num_layers, a.num_layers);
  EXPECT_EQ(b.hidden_size, a.hidden_size);
  EXPECT_EQ(b.intermediate_size, a.intermediate_size);
  EXPECT_EQ(b.num_heads, a.num_heads);
  EXPECT_EQ(b.num_kv_heads, a.num_kv_heads);
  EXPECT_EQ(b.head_dim, a.head_dim);
  EXPECT_EQ(b.vocab_size, a.vocab_size);
  EXPECT_EQ(b.context_length, a.context_length);
  EXPECT_EQ(b.rope_theta, a.rope_theta);  // from "rope_parameters" (transformers >= 5)
  EXPECT_EQ(b.rope_scaling.type, a.rope_scaling.type);
  EXPECT_FLOAT_EQ(static_cast<float>(b.rms_norm_eps), static_cast<float>(a.rms_norm_eps));
  EXPECT_EQ(b.attention_bias, a.attention_bias);
  std::ifstream in(fs::path(dir_) / "config.json");
  const json config = json::parse(in);
  EXPECT_TRUE(config.contains("rope_parameters")) << "expected a transformers >= 5 config.json";
}

TEST_P(HfExportTest, TokenizerMatchesTheGgufAndTheReference) {
  const Tokenizer& a = Load(gguf_)->tokenizer();
  const Tokenizer& b = Load(dir_)->tokenizer();
  const json fx = Fixture(GetParam().fixture_dir, "tokenizer.json");
  ASSERT_TRUE(fx.contains("cases"));
  for (const auto& c : fx["cases"]) {
    const std::string text = c["text"];
    const std::vector<TokenId> expected = c["ids"];
    EXPECT_EQ(b.Encode(text), expected) << text;
    EXPECT_EQ(b.Encode(text), a.Encode(text)) << text;
    EXPECT_EQ(b.Decode(expected), a.Decode(expected)) << text;
  }
  EXPECT_EQ(b.bos_id(), a.bos_id());
  EXPECT_EQ(b.eos_id(), a.eos_id());
  EXPECT_EQ(b.add_bos(), a.add_bos());
  for (const TokenId id : a.eog_ids()) EXPECT_TRUE(b.IsEog(id)) << id;
  EXPECT_EQ(b.chat_template().format(), a.chat_template().format());
  const std::vector<ChatMessage> chat = {
      {"user", "Hi!"}, {"assistant", "Hello."}, {"user", "2+2?"}};
  EXPECT_EQ(b.chat_template().Render(chat, true), a.chat_template().Render(chat, true));
  EXPECT_EQ(b.chat_template().Render({{"system", "Be brief."}, {"user", "x"}}, true),
            a.chat_template().Render({{"system", "Be brief."}, {"user", "x"}}, true));
}

TEST_P(HfExportTest, LogitsMatchTheGguf) {
  const auto a = Load(gguf_);
  const auto b = Load(dir_);
  const json fx = Fixture(GetParam().fixture_dir, "logits.json");
  ASSERT_TRUE(fx.contains("cases"));
  int checked = 0;
  for (const auto& c : fx["cases"]) {
    const std::vector<TokenId> ids = c["ids"];
    if (ids.size() > 1024) continue;  // the short cases suffice to compare two loaders
    SCOPED_TRACE(c["name"].get<std::string>());
    KvCache ca = a->NewCache(), cb = b->NewCache();
    const at::Tensor la = a->Forward(ids, 0, ca);
    const at::Tensor lb = b->Forward(ids, 0, cb);
    const double diff = (la - lb).abs().max().item<double>();
    EXPECT_LT(diff, kSameWeightsTol);
    const std::vector<int64_t> top_ids = c["top_ids"];
    const std::vector<double> top_logits = c["top_logits"];
    for (size_t i = 0; i < top_ids.size(); ++i) {
      EXPECT_NEAR(lb[top_ids[i]].item<double>(), top_logits[i], kReferenceTol);
    }
    std::printf("[ %s ] %s: max |GGUF - HF dir| = %.2e over all logits\n", GetParam().key,
                c["name"].get<std::string>().c_str(), diff);
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

// siftd itself on the directory: the chat is rendered from the directory's tokenizer_config /
// chat_template.jinja and the fp32 greedy answer is the reference's.
TEST_P(HfExportTest, SiftdServesTheDirectory) {
  testing::SiftdProcess siftd;
  const std::string error = siftd.Start({"--dtype", "fp32"}, dir_);
  ASSERT_EQ(error, "");
  const json fx = Fixture(GetParam().fixture_dir, "greedy.json");
  const std::string user = fx["messages"][0]["content"];
  int status = 0;
  const std::string out =
      RunCommand(std::string(SIFT_BINARY_DIR) + "/bin/sift -e " + siftd.endpoint() +
                     " generate -p full --message 'user:" + user + "' -n 32 --no-stream --json",
                 &status);
  ASSERT_EQ(status, 0) << out;
  const json final = json::parse(out.substr(out.find('{')), nullptr, false);
  ASSERT_FALSE(final.is_discarded()) << out;
  EXPECT_EQ(final.value("text", ""), fx["text"].get<std::string>()) << out;
}

INSTANTIATE_TEST_SUITE_P(Models, HfExportTest,
                         ::testing::Values(Exported{"SIFT_MODEL", "smollm2", ""},
                                           Exported{"SIFT_MODEL_QWEN", "qwen", "qwen/"}),
                         [](const auto& info) { return std::string(info.param.key); });

// ---- 2. siftd on a tiny directory ---------------------------------------------------------

// A 16-token byte-level tokenizer for TinyLlama (vocab 16): three ChatML specials and the
// letters a-m; other bytes have no symbol and are dropped.
void WriteTinyTokenizer(const std::string& dir) {
  json vocab = json::object();
  json added = json::array();
  const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (size_t i = 0; i < specials.size(); ++i) {
    vocab[specials[i]] = i;
    added.push_back({{"id", i}, {"content", specials[i]}, {"special", true}});
  }
  for (char c = 'a'; c <= 'm'; ++c) vocab[std::string(1, c)] = 3 + (c - 'a');
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  const json tokenizer = {
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
  testing::WriteText(dir + "/tokenizer.json", tokenizer.dump());
  testing::WriteText(
      dir + "/tokenizer_config.json",
      json{{"eos_token", "<|im_end|>"},
           {"chat_template",
            "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
            "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"}}
          .dump());
}

TEST(SiftdHfDirectoryTest, RefusedAtStartWithoutTokenizer) {
  testing::TempDir dir;
  testing::TinyLlama().Write(dir.path());
  testing::SiftdProcess siftd;
  const std::string error = siftd.Start({}, dir.path());
  EXPECT_NE(error.find("siftd exited during start-up"), std::string::npos) << error;
  EXPECT_NE(error.find("no tokenizer"), std::string::npos) << error;
  EXPECT_NE(error.find("tokenizer.json"), std::string::npos) << error;
}

TEST(SiftdHfDirectoryTest, ServesARequestWithTokenizerJson) {
  testing::TempDir dir;
  testing::TinyLlama tiny;
  tiny.model_type = "qwen2";
  tiny.Write(dir.path());
  WriteTinyTokenizer(dir.path());
  testing::SiftdProcess siftd;
  ASSERT_EQ(siftd.Start({}, dir.path()), "");
  int status = 0;
  const std::string sift =
      std::string(SIFT_BINARY_DIR) + "/bin/sift -e " + siftd.endpoint() + " generate -p full ";
  std::string out = RunCommand(sift + "--message 'user:abc dem' -n 4 --json", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("\"type\": \"final\""), std::string::npos) << out;
  out = RunCommand(sift + "--prompt 'hello' -n 2 --json", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(siftd.Stop(), 0) << siftd.log();
}

}  // namespace
}  // namespace sift
