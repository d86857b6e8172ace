#include "tools/common/command_line.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

namespace sift::cli {
namespace {

// Whether `token` names an option of `all` that takes exactly one value: "--name" (a long name)
// or "-x" (a short one), not "--name=value" or "-xvalue".
bool TakesOneValue(const po::options_description& all, const std::string& token) {
  const bool is_long = token.size() > 2 && token.compare(0, 2, "--") == 0;
  const bool is_short = token.size() == 2 && token[0] == '-' && token[1] != '-';
  if ((!is_long && !is_short) || token.find('=') != std::string::npos) return false;
  const po::option_description* d =
      all.find_nothrow(is_long ? token.substr(2) : token, /*approx=*/false);
  return d != nullptr && d->semantic()->min_tokens() == 1 && d->semantic()->max_tokens() == 1;
}

// Program_options takes the next argument as an option's value only when it does not look like
// a known option; getopt always takes it. "--name -x" becomes "--name=-x" (and "-n -1" "-n-1")
// so that a value may start with '-'.
std::vector<std::string> JoinValues(const po::options_description& all,
                                    const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {  // the end of the options: the rest is positional
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    if (i + 1 < args.size() && args[i + 1].size() > 1 && args[i + 1][0] == '-' &&
        TakesOneValue(all, args[i])) {
      out.push_back(args[i] + (args[i][1] == '-' ? "=" : "") + args[i + 1]);
      ++i;
    } else {
      out.push_back(args[i]);
    }
  }
  return out;
}

std::string Hint(const std::string& tool) { return " (see " + tool + " --help)"; }

}  // namespace

CommandLine::CommandLine(std::string tool, std::string usage, std::string description)
    : tool_(std::move(tool)), usage_(std::move(usage)), description_(std::move(description)) {
  options_.add_options()("help,h", "print this help and exit");
}

void CommandLine::AddGroup(const po::options_description& group) { groups_.push_back(group); }

void CommandLine::Positional(const std::string& name, int max_count,
                             const po::value_semantic* value) {
  if (value != nullptr) hidden_.add_options()(name.c_str(), value, "");
  positional_.add(name.c_str(), max_count);
}

void CommandLine::Command(const std::string& name, const std::string& summary) {
  commands_.emplace_back(name, summary);
}

const po::options_description& CommandLine::all_options() const {
  all_ = std::make_unique<po::options_description>();
  all_->add(options_);
  for (const po::options_description& g : groups_) all_->add(g);
  all_->add(hidden_);
  return *all_;
}

void CommandLine::Store(const std::vector<std::string>& args, po::variables_map* vm) const {
  const po::options_description& all = all_options();
  po::store(
      po::command_line_parser(JoinValues(all, args)).options(all).positional(positional_).run(),
      *vm);
}

int CommandLine::Parse(const std::vector<std::string>& args, po::variables_map* vm) const {
  try {
    Store(args, vm);
    if (vm->count("help")) {
      std::cout << Help() << std::flush;
      return 0;
    }
    po::notify(*vm);
  } catch (const po::error& e) {
    return Error(e.what());
  }
  return kContinue;
}

int CommandLine::Parse(int argc, const char* const* argv, po::variables_map* vm) const {
  return Parse(std::vector<std::string>(argv + (argc > 0 ? 1 : 0), argv + argc), vm);
}

int CommandLine::ParseCommand(int argc, const char* const* argv, po::variables_map* vm,
                              std::string* command, std::vector<std::string>* rest) const {
  const std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  const po::options_description& all = all_options();
  // The command is the first argument that is neither an option nor an option's value.
  size_t i = 0;
  while (i < args.size() && args[i].size() > 1 && args[i][0] == '-' && args[i] != "--") {
    i += TakesOneValue(all, args[i]) ? 2 : 1;
  }
  if (i < args.size() && args[i] == "--") ++i;
  const size_t end = std::min(i, args.size());
  const int status = Parse(std::vector<std::string>(args.begin(), args.begin() + end), vm);
  if (status != kContinue) return status;
  command->clear();
  rest->clear();
  if (end < args.size()) {
    *command = args[end];
    rest->assign(args.begin() + static_cast<std::ptrdiff_t>(end) + 1, args.end());
  }
  if (!command->empty() && !commands_.empty()) {
    std::string names;
    for (const auto& [name, summary] : commands_) {
      if (name == *command) return kContinue;
      names += (names.empty() ? "" : ", ") + name;
    }
    return Error("unknown command '" + *command + "' (commands: " + names + ")");
  }
  return kContinue;
}

std::string CommandLine::Help() const {
  std::ostringstream os;
  os << "usage: " << usage_ << "\n";
  if (!description_.empty()) os << "\n" << description_ << "\n";
  os << "\n" << options_;
  for (const po::options_description& g : groups_) os << "\n" << g;
  if (!commands_.empty()) {
    size_t width = 0;
    for (const auto& c : commands_) width = std::max(width, c.first.size());
    os << "\ncommands:\n";
    for (const auto& [name, summary] : commands_) {
      os << "  " << name << std::string(width - name.size() + 2, ' ') << summary << "\n";
    }
    os << "(" << tool_ << " COMMAND --help: that command's options)\n";
  }
  if (!epilog_.empty()) os << "\n" << epilog_ << (epilog_.back() == '\n' ? "" : "\n");
  return os.str();
}

int CommandLine::Error(const std::string& message) const {
  std::fprintf(stderr, "%s: error: %s%s\n", tool_.c_str(), message.c_str(), Hint(tool_).c_str());
  return kUsageError;
}

int Run(const std::string& tool, int failure_status, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: error: %s%s\n", tool.c_str(), e.what(), Hint(tool).c_str());
    return kUsageError;
  } catch (const po::error& e) {
    std::fprintf(stderr, "%s: error: %s%s\n", tool.c_str(), e.what(), Hint(tool).c_str());
    return kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool.c_str(), e.what());
    return failure_status;
  }
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<int64_t> IntList(const std::string& text, const std::string& option) {
  std::vector<int64_t> out;
  for (const std::string& item : SplitList(text)) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size()) {
      throw UsageError(option + ": '" + item + "' is not an integer");
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace sift::cli
