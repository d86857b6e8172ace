// sift-spts-calibrate: builds the SPTS LTP proxy file for a model from calibration text
// (docs/methods/spts.md). Prints progress to stderr and a summary line to stdout.
//
//   sift-spts-calibrate --model models/SmolLM2-135M-Instruct.Q4_1.gguf
//       --text /work/shared/data/pg_essays [--out FILE] [--d-low 256] [--rank 64] [--rho 0.2]
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

namespace {

void Usage() {
  std::cerr << "usage: sift-spts-calibrate --model MODEL.gguf --text FOLDER [--out FILE]\n"
               "         [--d-low 256] [--rank 64] [--rho 0.2] [--sequences 32] [--seq-len 256]\n"
               "         [--threads 0] [--dtype bf16|fp32] [--device cpu|cuda]\n"
               "Reads *.txt/*.md under FOLDER, writes the LTP proxies (default: next to the\n"
               "model, <model without .gguf>.spts.bin, where prefill_skip looks by default).\n";
}

}  // namespace

int main(int argc, char** argv) {
  sift::ConfigureThreadEnvironment(argv);
  std::string model_path = std::getenv("SIFT_MODEL") ? std::getenv("SIFT_MODEL") : "";
  std::string text, out, dtype = "bf16", device = "cpu";
  int threads = 0;
  sift::spts::CalibrationOptions options;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw sift::Error(a + " needs a value");
        return argv[++i];
      };
      if (a == "--model")
        model_path = value();
      else if (a == "--text")
        text = value();
      else if (a == "--out")
        out = value();
      else if (a == "--d-low")
        options.d_low = std::stoll(value());
      else if (a == "--rank")
        options.rank = std::stoll(value());
      else if (a == "--rho")
        options.rho = std::stod(value());
      else if (a == "--sequences")
        options.sequences = std::stoll(value());
      else if (a == "--seq-len")
        options.seq_len = std::stoll(value());
      else if (a == "--threads")
        threads = std::stoi(value());
      else if (a == "--dtype")
        dtype = value();
      else if (a == "--device")
        device = value();
      else if (a == "-h" || a == "--help") {
        Usage();
        return 0;
      } else {
        throw sift::Error("unknown argument " + a);
      }
    }
    if (model_path.empty() || text.empty()) {
      Usage();
      return 2;
    }
    if (options.sequences < 1 || options.seq_len < 2)
      throw sift::Error("bad --sequences/--seq-len");
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
  } catch (const std::exception& e) {
    std::cerr << "sift-spts-calibrate: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
