// The layer scans (docs/results/filters.md):
//   GemFilter (paper Figure 5 / §4.3): one partial prefill through every layer collecting the
//     last query's raw scores; per layer r and budget, whether GemFilter's top-k (kernel 5)
//     covers the needle's answer tokens, the fraction of the needle sentence kept, and the best
//     rank of an answer token among the context's pooled scores.
//   ILRe (paper App. A.1): one streaming prefill collecting A^C at every layer; per layer l_R
//     and budget, whether the multi-kernel allocation keeps every answer token (selection
//     recall, no generation).
// Rows go to <out>/scan.csv; the per-layer summary to <out>/scan.md and stdout.
//
// THREADING: single-threaded driver (LibTorch uses its pool). ERRORS: sift::Error.
#ifndef SIFT_TOOLS_LAYER_SCAN_SCAN_H_
#define SIFT_TOOLS_LAYER_SCAN_SCAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sift/model.h"

namespace sift::layer_scan {

struct ScanOptions {
  std::string task = "passkey";
  std::vector<int64_t> lengths = {4096};
  std::vector<int> depths = {10, 50, 90};
  int64_t samples = 1;  // per (length, depth)
  uint64_t seed = 0;
  std::string haystack_dir;
  std::vector<int64_t> budgets = {256, 1024};
  bool gemfilter = true, ilre = true;
  std::string out_dir = ".";
};

int RunScan(const Model& model, const ScanOptions& options);

}  // namespace sift::layer_scan

#endif  // SIFT_TOOLS_LAYER_SCAN_SCAN_H_
