// sift-bench: accuracy and speed harness over siftd (docs/bench.md).
//   sift-bench accuracy (--endpoint URL | --spawn | --in-process) [--config ...] [--tasks ...]
//   sift-bench speed    (--endpoint URL | --spawn) [--config ...] [--lengths ...]
//   sift-bench ops      --in-process [--config ...] [--lengths ...]
//   sift-bench report   --in DIR[,DIR...] --out FILE.md
//   sift-bench --help, sift-bench COMMAND --help: the options
#include <string>
#include <vector>

#include "cli.h"
#include "sift/model.h"
#include "tools/common/command_line.h"

int main(int argc, char** argv) {
  sift::ConfigureThreadEnvironment(argv);
  sift::cli::CommandLine cl("sift-bench", "sift-bench COMMAND [options]",
                            "Accuracy and speed of pipelines over siftd, on generated tasks "
                            "(docs/bench.md).");
  cl.Command("accuracy", "scores every config on passkey, needle and RULER-style tasks");
  cl.Command("speed", "TTFT, decode speed, KV bytes and peak RSS per config and length");
  cl.Command("ops", "LibTorch operators and host reads per prefill layer and decode token");
  cl.Command("report", "a Markdown report with plots from accuracy and speed results");
  boost::program_options::variables_map vm;
  std::string command;
  std::vector<std::string> rest;
  if (const int status = cl.ParseCommand(argc, argv, &vm, &command, &rest);
      status != sift::cli::kContinue) {
    return status;
  }
  if (command.empty()) return cl.Error("no command (accuracy, speed, ops or report)");
  // Every failure of a command is exit status 2, as before the shared command line.
  return sift::cli::Run("sift-bench " + command, 2, [&] {
    if (command == "accuracy") return sift::bench::RunAccuracy(argc, argv);
    if (command == "speed") return sift::bench::RunSpeed(argc, argv);
    if (command == "ops") return sift::bench::RunOps(argc, argv);
    return sift::bench::RunReport(argc, argv);
  });
}
