// sift-spts-calibrate: builds the SPTS LTP proxy file for a model from calibration text
// (docs/methods/spts.md). Prints progress to stderr and a summary line to stdout.
//
//   sift-spts-calibrate --model models/SmolLM2-135M-Instruct.Q4_1.gguf
//       [--text FOLDER (default tools/bench/corpus/world-english-bible)] [--out FILE] [--d-low 256]
//       [--rank 64] [--rho 0.2]
//       [--sequences 32] [--seq-len 256] [--threads 0] [--dtype bf16|fp32] [--device cpu|cuda]
//
// --out defaults to the path prefill_skip looks for: <model path without .gguf>.spts.bin.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "prefill_skip_stage.h"
#include "sift/device.h"
#include "sift/error.h"
#include "sift/model.h"
#include "spts_calibration.h"
#include "tools/common/command_line.h"

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  sift::ConfigureThreadEnvironment(argv);
  std::string model_path = std::getenv("SIFT_MODEL") ? std::getenv("SIFT_MODEL") : "";
  // The public-domain corpus committed with the tools
  // (tools/bench/corpus/world-english-bible/README.md).
  std::string text = std::string(SIFT_SOURCE_DIR) + "/tools/bench/corpus/world-english-bible";
  std::string out, dtype = "bf16", device = "cpu";
  int threads = 0;
  sift::spts::CalibrationOptions options;
  sift::cli::CommandLine cl(
      "sift-spts-calibrate", "sift-spts-calibrate --model MODEL.gguf [--text FOLDER] [options]",
      "Builds the SPTS LTP proxy file for a model from the *.txt/*.md files under FOLDER\n"
      "(docs/methods/spts.md). Progress on stderr, a summary line on stdout.");
  // clang-format off
  cl.Add()
      ("model", po::value(&model_path)->value_name("FILE"), "GGUF file (default $SIFT_MODEL)")
      ("text", po::value(&text)->value_name("FOLDER")->default_value(text),
       "calibration text: *.txt/*.md under it (default: the World English Bible corpus in the tree)")
      ("out", po::value(&out)->value_name("FILE"),
       "the proxy file (default: next to the model, <model without .gguf>.spts.bin, where "
       "prefill_skip looks by default)")
      ("d-low", po::value(&options.d_low)->default_value(options.d_low),
       "low-rank dimension of the proxies")
      ("rank", po::value(&options.rank)->default_value(options.rank), "proxy rank")
      ("rho", po::value(&options.rho)->default_value(options.rho), "LTP's rho")
      ("sequences", po::value(&options.sequences)->default_value(options.sequences),
       "calibration sequences")
      ("seq-len", po::value(&options.seq_len)->default_value(options.seq_len),
       "tokens per sequence")
      ("threads", po::value(&threads)->default_value(threads), "CPU threads (0 = all cores)")
      ("dtype", po::value(&dtype)->default_value(dtype), "bf16 | fp32")
      ("device", po::value(&device)->default_value(device), "cpu | cuda | cuda:N");
  // clang-format on
  po::variables_map vm;
  if (const int status = cl.Parse(argc, argv, &vm); status != sift::cli::kContinue) return status;
  if (model_path.empty()) return cl.Error("no model: --model FILE or $SIFT_MODEL");
  if (text.empty()) return cl.Error("no calibration text: --text FOLDER");
  if (options.sequences < 1 || options.seq_len < 2) {
    return cl.Error("--sequences must be >= 1 and --seq-len >= 2");
  }
  return sift::cli::Run("sift-spts-calibrate", 1, [&] {
    sift::ConfigureThreads(threads);
    const auto start = std::chrono::steady_clock::now();
    sift::ModelOptions mo;
    mo.dtype = sift::ParseDtype(dtype);
    mo.device = sift::ParseDevice(device);
    auto model = sift::Model::Load(model_path, mo);
    if (out.empty()) out = sift::plugins::PrefillSkipStage::ResolveProxyPath("", *model);
    std::vector<std::string> files;
    auto sequences = sift::spts::CalibrationSequences(*model, text, options, &files);
    std::cerr << "calibrating on " << sequences.size() << " x " << options.seq_len
              << " tokens from " << files.size() << " file(s) under " << text << "\n";
    options.progress = [&](const std::string& what, int64_t done, int64_t total) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "  %s %lld/%lld (%.1f s)\n", what.c_str(), static_cast<long long>(done),
                   static_cast<long long>(total), s);
    };
    nlohmann::json calibration = {
        {"folder", text}, {"files", files.size()}, {"seq_len", options.seq_len}, {"dtype", dtype}};
    std::vector<std::string> names;
    for (const auto& f : files) names.push_back(std::filesystem::path(f).filename().string());
    calibration["file_names"] = names;
    sift::plugins::SptsProxy proxy = sift::spts::Calibrate(*model, sequences, options, calibration);
    proxy.Save(out);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("wrote %s: %lld layers, d_low %lld, rank %lld, %lld calibration tokens, %.1f s\n",
                out.c_str(), static_cast<long long>(proxy.layers.size()),
                static_cast<long long>(proxy.d_low()), static_cast<long long>(proxy.rank()),
                static_cast<long long>(sequences.size() * options.seq_len), s);
    return 0;
  });
}
