// The command line of every sift binary (siftd, sift, sift-model, sift-bench and the other tools
// under tools/): Boost.Program_options with one behaviour everywhere.
//
//   --help, -h    prints "usage: ...", the description, the option table and the commands (if
//                 any) on stdout; exit status 0
//   usage errors  an unknown option, a missing or bad value, an unknown command: one line
//                 "<tool>: error: <what> (see <tool> --help)" on stderr; exit status 2
//   values        an option that takes one value takes the next argument whatever it looks like
//                 (--seed -1, --siftd-arg --threads=2), as getopt does; --name=value works too
//
// A tool builds one CommandLine per command (e.g. "sift-bench accuracy"), adds its options, and
// calls Parse. tests/lint/tools_help_test.sh runs every built tool, and every command its help
// lists, with --help and with a bogus option.
//
//   sift::cli::CommandLine cl("sift-foo", "sift-foo [options] MODEL", "What sift-foo does.");
//   cl.Add()("lengths", po::value(&lengths)->default_value("512"), "prefill lengths");
//   cl.Positional("model", 1, po::value(&model));
//   po::variables_map vm;
//   if (const int status = cl.Parse(argc, argv, &vm); status != sift::cli::kContinue) {
//     return status;  // 0 after --help, 2 after a usage error (both printed)
//   }
//
// THREADING: main thread only. ERRORS: Parse prints and returns a status; TryParse / Store throw
// or report instead, for callers that print themselves (siftd's ParseOptions).
#ifndef SIFT_TOOLS_COMMON_COMMAND_LINE_H_
#define SIFT_TOOLS_COMMON_COMMAND_LINE_H_

#include <boost/program_options.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace sift::cli {

namespace po = boost::program_options;

// Parse's status when the tool should go on with the parsed options.
inline constexpr int kContinue = -1;
// The exit status of a usage error.
inline constexpr int kUsageError = 2;

// A usage error found after parsing (a bad list, a missing input, a bad combination). Run turns
// it into the one-line error and exit status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CommandLine {
 public:
  // `tool`: the name in messages ("sift-bench accuracy"). `usage`: what follows "usage: " (lines
  // after the first are printed as they are). `description`: a paragraph after the usage line.
  // Adds --help / -h.
  CommandLine(std::string tool, std::string usage, std::string description = "");

  // Options shown in the table (under "options:").
  po::options_description_easy_init Add() { return options_.add_options(); }
  // A titled group of options shown in the table after the ungrouped ones.
  void AddGroup(const po::options_description& group);
  // A positional argument stored under `name` (max_count -1: every remaining one). With a
  // `value`, it is not in the table (name it in the usage line); without, `name` is an option
  // added before, which the argument may also be given as (--model M or M).
  void Positional(const std::string& name, int max_count,
                  const po::value_semantic* value = nullptr);
  // A command listed under "commands:" in the help. With commands, ParseCommand refuses others.
  void Command(const std::string& name, const std::string& summary);
  // Text printed after the table and the commands.
  void Epilog(const std::string& text) { epilog_ = text; }

  // Parses `args` (no program name): kContinue with `vm` stored and notified; 0 after printing the
  // help; kUsageError after printing the error.
  int Parse(const std::vector<std::string>& args, po::variables_map* vm) const;
  // The same on argv[1..argc).
  int Parse(int argc, const char* const* argv, po::variables_map* vm) const;

  // "[options] COMMAND [arguments...]": parses the options before the first positional argument
  // with this command line (Parse's statuses), sets `command` (empty when none was given) and
  // `rest` to what follows it. A command that Command() did not list is a usage error.
  int ParseCommand(int argc, const char* const* argv, po::variables_map* vm, std::string* command,
                   std::vector<std::string>* rest) const;

  // For callers that report themselves: stores `args` into `vm` without notifying it and without
  // looking at --help; throws po::error.
  void Store(const std::vector<std::string>& args, po::variables_map* vm) const;

  // The whole help text ("usage: ..." first).
  std::string Help() const;
  // Prints "<tool>: error: <message> (see <tool> --help)" on stderr; returns kUsageError.
  int Error(const std::string& message) const;

  const std::string& tool() const { return tool_; }
  // Every option (the table's and the positional ones'), e.g. for po::parse_config_file.
  const po::options_description& all_options() const;

 private:
  std::string tool_, usage_, description_, epilog_;
  po::options_description options_{"options"};
  std::vector<po::options_description> groups_;
  po::options_description hidden_;
  po::positional_options_description positional_;
  std::vector<std::pair<std::string, std::string>> commands_;
  mutable std::unique_ptr<po::options_description> all_;  // all_options()
};

// Runs `body` and maps its exceptions to an exit status: UsageError and po::error print
// "<tool>: error: <what> (see <tool> --help)" and give kUsageError; any other std::exception
// prints "<tool>: error: <what>" and gives `failure_status`.
int Run(const std::string& tool, int failure_status, const std::function<int()>& body);

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> SplitList(const std::string& text);
// "512,2048" -> {512, 2048}; a UsageError naming `option` for anything that is not an integer.
std::vector<int64_t> IntList(const std::string& text, const std::string& option);

}  // namespace sift::cli

#endif  // SIFT_TOOLS_COMMON_COMMAND_LINE_H_
