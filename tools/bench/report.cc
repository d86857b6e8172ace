// `sift-bench report --in DIR[,DIR...] --out FILE.md`: runs tools/bench/report.py (tables in
// Markdown, PNG heatmaps and latency plots next to FILE.md) with the venv's Python when
// tools/bench/.venv exists, else python3 (tables only when matplotlib is missing).
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "cli.h"
#include "sift/error.h"

namespace sift::bench {

int RunReport(int argc, char** argv) {
  cli::CommandLine cl("sift-bench report",
                      "sift-bench report --in DIR[,DIR...] --out FILE.md [--title T] "
                      "[--preamble MARKDOWN]",
                      "Tables in Markdown, PNG heatmaps and latency plots (in the folder FILE/ "
                      "next to FILE.md)\nfrom accuracy and speed results, by "
                      "tools/bench/report.py (docs/bench.md).");
  po::options_description own("report options");
  AddValue(&own, "in", "DIR[,DIR...]", "result folders of accuracy and speed runs");
  AddValue(&own, "out", "FILE.md", "the report");
  AddValue(&own, "title", "T", "the report's title");
  AddValue(&own, "preamble", "MARKDOWN", "text after the title");
  cl.AddGroup(own);
  po::variables_map vm;
  if (const int status = ParseCommand(cl, argc, argv, &vm); status != cli::kContinue) return status;
  const Args args(std::move(vm));
  if (!args.Has("in") || !args.Has("out")) {
    throw cli::UsageError("report needs --in DIR[,DIR...] --out FILE.md");
  }
  const std::string tools = std::string(SIFT_SOURCE_DIR) + "/tools/bench";
  std::string python = tools + "/.venv/bin/python";
  if (!std::filesystem::exists(python)) python = "python3";
  std::vector<std::string> cmd = {python,  tools + "/report.py", "--in", args.Get("in"),
                                  "--out", args.Get("out")};
  for (const char* k : {"title", "preamble"}) {
    if (args.Has(k)) cmd.insert(cmd.end(), {std::string("--") + k, args.Get(k)});
  }
  std::vector<char*> argv2;
  for (auto& a : cmd) argv2.push_back(a.data());
  argv2.push_back(nullptr);
  ::execvp(argv2[0], argv2.data());
  std::perror("sift-bench report: exec python");
  return 1;
}

}  // namespace sift::bench
