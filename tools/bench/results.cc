#include "results.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "sift/error.h"

namespace sift::bench {
namespace {

std::string CsvField(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (!v.is_string()) return v.dump();
  const std::string s = v.get<std::string>();
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  return out + "\"";
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

// The command line with absolute paths (whole arguments or the value of --key=VALUE) spelt
// repository-relative.
std::string RelativeCommand(int argc, char** argv) {
  std::string cmd;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    const size_t eq = arg.rfind("--", 0) == 0 ? arg.find('=') : std::string::npos;
    if (!arg.empty() && arg[0] == '/') {
      arg = RepoRelativePath(arg);
    } else if (eq != std::string::npos && eq + 1 < arg.size() && arg[eq + 1] == '/') {
      arg = arg.substr(0, eq + 1) + RepoRelativePath(arg.substr(eq + 1));
    }
    cmd += (i ? " " : "") + arg;
  }
  return cmd;
}

}  // namespace

std::string RepoRelativePath(const std::string& path, const std::string& root) {
  namespace fs = std::filesystem;
  if (path.empty() || root.empty() || path.find("://") != std::string::npos) return path;
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec).lexically_normal();
  const fs::path r = fs::absolute(root, ec).lexically_normal();
  if (ec) return path;
  auto within = [](const fs::path& inner, const fs::path& outer) -> fs::path {
    const fs::path rel = inner.lexically_relative(outer);
    if (rel.empty() || *rel.begin() == "..") return {};
    return rel;
  };
  // A trailing separator ("/repo/") leaves an empty last component: compare without it.
  const fs::path root_dir = r.has_filename() ? r : r.parent_path();
  if (const fs::path inside = within(p, root_dir); !inside.empty()) {
    const std::string s = inside.string();
    return s == "." ? "." : s;
  }
  const fs::path parent = root_dir.parent_path();
  if (!parent.empty() && parent != root_dir.root_path()) {
    if (const fs::path beside = within(p, parent); !beside.empty() && beside.string() != ".") {
      return (fs::path("..") / beside).string();
    }
  }
  return path;
}

std::string RepoRelativePath(const std::string& path) {
  return RepoRelativePath(path, SIFT_SOURCE_DIR);
}

std::string CommandOutput(const std::string& command) {
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

nlohmann::json MakeMeta(int argc, char** argv, const std::string& model) {
  const std::string cmd = RelativeCommand(argc, argv);
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const std::string src = SIFT_SOURCE_DIR;
  nlohmann::json meta = {
      {"date", date},
      {"command", cmd},
      {"cpu", CpuModel()},
      {"cores", std::thread::hardware_concurrency()},
      {"loadavg", CommandOutput("cut -d' ' -f1-3 /proc/loadavg")},
      {"commit", CommandOutput("git -C '" + src + "' rev-parse --short HEAD 2>/dev/null")},
      {"dirty",
       !CommandOutput("git -C '" + src + "' status --porcelain --untracked-files=no 2>/dev/null")
            .empty()},
      {"model", RepoRelativePath(model)},
  };
  if (!model.empty()) {
    const std::string sha = CommandOutput("sha256sum '" + model + "' 2>/dev/null");
    meta["model_sha256"] = sha.substr(0, sha.find(' '));
    meta["model_file"] = std::filesystem::path(model).filename().string();
  }
  return meta;
}

void WriteResults(const std::string& dir, const std::string& suite, const nlohmann::json& meta,
                  const nlohmann::json& rows, const std::vector<std::string>& columns) {
  std::filesystem::create_directories(dir);
  // Each file is written beside its name and renamed over it: a reader (or a run stopped while
  // writing) sees the previous complete file or the new one, never half of one.
  const auto write = [&](const std::string& name, const auto& body) {
    const std::string path = dir + "/" + name, part = path + ".part";
    {
      std::ofstream out(part);
      body(out);
      if (!out.flush()) throw Error("cannot write " + part);
    }
    std::filesystem::rename(part, path);
  };
  write(suite + ".json", [&](std::ofstream& out) {
    out << nlohmann::json{{"suite", suite}, {"meta", meta}, {"rows", rows}}.dump(1) << "\n";
  });
  write(suite + ".csv", [&](std::ofstream& csv) {
    for (size_t i = 0; i < columns.size(); ++i) csv << (i ? "," : "") << columns[i];
    csv << "\n";
    for (const auto& row : rows) {
      for (size_t i = 0; i < columns.size(); ++i) {
        csv << (i ? "," : "") << CsvField(row.value(columns[i], nlohmann::json()));
      }
      csv << "\n";
    }
  });
}

}  // namespace sift::bench
