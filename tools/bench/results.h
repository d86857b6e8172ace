// sift-bench raw results: DIR/<suite>.json ({"suite", "meta", "rows": [...]}) and DIR/<suite>.csv
// (one line per row, the given columns; strings quoted as RFC 4180). Meta describes the run:
// machine (CPU model, cores, load), model file + sha256, commit, command line, settings.
//
// THREADING: pure functions. ERRORS: WriteResults throws sift::Error when a file cannot be
// written.
#ifndef SIFT_TOOLS_BENCH_RESULTS_H_
#define SIFT_TOOLS_BENCH_RESULTS_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sift::bench {

// Machine, model, commit and the command line. `model` may be "".
nlohmann::json MakeMeta(int argc, char** argv, const std::string& model);
void WriteResults(const std::string& dir, const std::string& suite, const nlohmann::json& meta,
                  const nlohmann::json& rows, const std::vector<std::string>& columns);
// Output of a shell command (trailing newline removed), "" on failure.
std::string CommandOutput(const std::string& command);

}  // namespace sift::bench

#endif  // SIFT_TOOLS_BENCH_RESULTS_H_
