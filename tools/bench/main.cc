// sift-bench: accuracy and speed harness over siftd (docs/bench.md).
//   sift-bench accuracy (--endpoint URL | --spawn | --in-process) [--config ...] [--tasks ...]
//   sift-bench speed    (--endpoint URL | --spawn) [--config ...] [--lengths ...]
//   sift-bench report   --in DIR[,DIR...] --out FILE.md
#include <cstdio>
#include <cstring>
#include <exception>

#include "cli.h"
#include "sift/model.h"

namespace {

const char kUsage[] =
    "usage: sift-bench accuracy|speed|report [options]   (docs/bench.md)\n"
    "  accuracy  --spawn|--endpoint URL|--in-process [--pipelines a,b] [--config "
    "label=pipeline:{json}]\n"
    "            [--tasks t1,t2] [--lengths 1024,2048] [--depths 0,50,100] [--samples N] "
    "[--seed S]\n"
    "            [--out DIR] [--quick] [--haystack DIR] [--no-share-prefill]\n"
    "  speed     --spawn|--endpoint URL [configs] [--lengths ...] [--repeats N] [--max-tokens M] "
    "[--out DIR]\n"
    "  report    --in DIR[,DIR...] --out FILE.md\n";

}  // namespace

int main(int argc, char** argv) {
  sift::ConfigureThreadEnvironment(argv);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  try {
    if (command == "accuracy") return sift::bench::RunAccuracy(argc, argv);
    if (command == "speed") return sift::bench::RunSpeed(argc, argv);
    if (command == "report") return sift::bench::RunReport(argc, argv);
    std::fprintf(stderr, "sift-bench: unknown command '%s'\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sift-bench %s: %s\n", command.c_str(), e.what());
    return 2;
  }
}
