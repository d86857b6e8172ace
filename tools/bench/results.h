// sift-bench raw results: DIR/<suite>.json ({"suite", "meta", "rows": [...]}) and DIR/<suite>.csv
// (one line per row, the given columns; strings quoted as RFC 4180). Meta describes the run:
// machine (CPU model, cores, load), model file + sha256, commit, command line, settings.
// Paths in the meta (model, haystack, the command's arguments) are written as RepoRelativePath
// spells them, so committed results name no machine's folders.
//
// THREADING: pure functions. ERRORS: WriteResults throws sift::Error when a file cannot be
// written.
#ifndef SIFT_TOOLS_BENCH_RESULTS_H_
#define SIFT_TOOLS_BENCH_RESULTS_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sift::bench {

// `path` as results spell it: relative to the repository `root` when it lies inside it
// ("models/x.gguf"), "../<rest>" when it lies beside it, i.e. under the root's parent folder
// ("../shared/data/pg_essays"), otherwise as given (e.g. "/tmp/run", "", a URL). A relative
// `path` is first resolved against the current directory; the comparison is lexical (symbolic
// links are not followed), so a path spelt through the repository stays inside it.
std::string RepoRelativePath(const std::string& path, const std::string& root);
// The same against this source tree (SIFT_SOURCE_DIR).
std::string RepoRelativePath(const std::string& path);

// Machine, model, commit and the command line. `model` may be "".
nlohmann::json MakeMeta(int argc, char** argv, const std::string& model);
// Writes DIR/<suite>.json and .csv, each replaced whole (written as <name>.part and renamed):
// call it again as rows accumulate, and a reader or a stopped run never sees half a file.
void WriteResults(const std::string& dir, const std::string& suite, const nlohmann::json& meta,
                  const nlohmann::json& rows, const std::vector<std::string>& columns);
// Output of a shell command (trailing newline removed), "" on failure.
std::string CommandOutput(const std::string& command);

}  // namespace sift::bench

#endif  // SIFT_TOOLS_BENCH_RESULTS_H_
