#include "daemon/metrics.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace sift::daemon {
namespace {

const char* TypeName(Metrics::Type type) {
  switch (type) {
    case Metrics::Type::kCounter:
      return "counter";
    case Metrics::Type::kGauge:
      return "gauge";
    case Metrics::Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

// Adds le="..." to a rendered label set.
std::string WithLe(const std::string& labels, const std::string& le) {
  if (labels.empty()) return "{le=\"" + le + "\"}";
  return labels.substr(0, labels.size() - 1) + ",le=\"" + le + "\"}";
}

}  // namespace

std::string RenderLabels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ',';
    out += labels[i].first;
    out += "=\"";
    for (char c : labels[i].second) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '"') {
        out += "\\\"";
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += '"';
  }
  out += '}';
  return out;
}

std::vector<double> Metrics::LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

void Metrics::DeclareCounter(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = families_[name];
  f.type = Type::kCounter;
  f.help = help;
}

void Metrics::DeclareGauge(const std::string& name, const std::string& help) {
  Declare(name, help, Type::kGauge, nullptr);
}

void Metrics::DeclareGauge(const std::string& name, const std::string& help,
                           std::function<double()> read) {
  Declare(name, help, Type::kGauge, std::move(read));
}

void Metrics::DeclareCounter(const std::string& name, const std::string& help,
                             std::function<double()> read) {
  Declare(name, help, Type::kCounter, std::move(read));
}

void Metrics::Declare(const std::string& name, const std::string& help, Type type,
                      std::function<double()> read) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = families_[name];
  f.type = type;
  f.help = help;
  f.read = std::move(read);
}

void Metrics::DeclareHistogram(const std::string& name, const std::string& help,
                               std::vector<double> upper_bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = families_[name];
  f.type = Type::kHistogram;
  f.help = help;
  f.bounds = std::move(upper_bounds);
}

Metrics::Family& Metrics::Find(const std::string& name, Type type) {
  auto it = families_.find(name);
  if (it == families_.end() || it->second.type != type) {
    throw std::logic_error("metrics: undeclared " + std::string(TypeName(type)) + " " + name);
  }
  return it->second;
}

void Metrics::Add(const std::string& name, const Labels& labels, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end() || it->second.type == Type::kHistogram) {
    throw std::logic_error("metrics: undeclared counter " + name);
  }
  it->second.series[RenderLabels(labels)].value += value;
}

void Metrics::Set(const std::string& name, const Labels& labels, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  Find(name, Type::kGauge).series[RenderLabels(labels)].value = value;
}

void Metrics::Observe(const std::string& name, const Labels& labels, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = Find(name, Type::kHistogram);
  Series& s = f.series[RenderLabels(labels)];
  if (s.buckets.empty()) s.buckets.assign(f.bounds.size(), 0);
  for (size_t i = 0; i < f.bounds.size(); ++i) {
    if (value <= f.bounds[i]) {
      ++s.buckets[i];
      break;
    }
  }
  s.sum += value;
  ++s.count;
}

double Metrics::Value(const std::string& name, const Labels& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  if (it->second.read) return it->second.read();
  auto s = it->second.series.find(RenderLabels(labels));
  if (s == it->second.series.end()) return 0;
  return it->second.type == Type::kHistogram ? static_cast<double>(s->second.count)
                                             : s->second.value;
}

std::string Metrics::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    out += "# HELP " + name + " " + f.help + "\n";
    out += "# TYPE " + name + " " + TypeName(f.type) + "\n";
    if (f.read) {
      out += name + " " + Number(f.read()) + "\n";
      continue;
    }
    for (const auto& [labels, s] : f.series) {
      if (f.type != Type::kHistogram) {
        out += name + labels + " " + Number(s.value) + "\n";
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < f.bounds.size(); ++i) {
        cumulative += s.buckets.empty() ? 0 : s.buckets[i];
        out += name + "_bucket" + WithLe(labels, Number(f.bounds[i])) + " " +
               Number(static_cast<double>(cumulative)) + "\n";
      }
      out += name + "_bucket" + WithLe(labels, "+Inf") + " " +
             Number(static_cast<double>(s.count)) + "\n";
      out += name + "_sum" + labels + " " + Number(s.sum) + "\n";
      out += name + "_count" + labels + " " + Number(static_cast<double>(s.count)) + "\n";
    }
  }
  return out;
}

}  // namespace sift::daemon
