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

}  // namespace

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
  std::string cmd;
  for (int i = 0; i < argc; ++i) cmd += (i ? " " : "") + std::string(argv[i]);
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
      {"model", model},
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
  {
    std::ofstream out(dir + "/" + suite + ".json");
    out << nlohmann::json{{"suite", suite}, {"meta", meta}, {"rows", rows}}.dump(1) << "\n";
    if (!out) throw Error("cannot write " + dir + "/" + suite + ".json");
  }
  std::ofstream csv(dir + "/" + suite + ".csv");
  for (size_t i = 0; i < columns.size(); ++i) csv << (i ? "," : "") << columns[i];
  csv << "\n";
  for (const auto& row : rows) {
    for (size_t i = 0; i < columns.size(); ++i) {
      csv << (i ? "," : "") << CsvField(row.value(columns[i], nlohmann::json()));
    }
    csv << "\n";
  }
  if (!csv) throw Error("cannot write " + dir + "/" + suite + ".csv");
}

}  // namespace sift::bench
