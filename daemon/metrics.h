// Metrics: a small Prometheus registry (counters, gauges, histograms with labels) and the
// text exposition format (version 0.0.4) served on /metrics.
//
// Families are declared once (name, help, type, histogram buckets); series are created on
// first use with their label values. Gauges may instead be computed at scrape time by a
// callback (queue depth, running requests).
//
// THREADING: every method is safe from any thread (one mutex; a few updates per request).
// ERRORS:    using an undeclared family or the wrong type is a programming error and throws
//            std::logic_error.
#ifndef SIFT_DAEMON_METRICS_H_
#define SIFT_DAEMON_METRICS_H_

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace sift::daemon {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Metrics {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  void DeclareCounter(const std::string& name, const std::string& help);
  // A counter read at scrape time (no labels): `read` must never decrease.
  void DeclareCounter(const std::string& name, const std::string& help,
                      std::function<double()> read);
  // (Re)declares a gauge set with Set(); also detaches a scrape-time callback.
  void DeclareGauge(const std::string& name, const std::string& help);
  // A gauge read at scrape time (no labels).
  void DeclareGauge(const std::string& name, const std::string& help, std::function<double()> read);
  void DeclareHistogram(const std::string& name, const std::string& help,
                        std::vector<double> upper_bounds);

  void Add(const std::string& name, const Labels& labels, double value = 1);
  void Set(const std::string& name, const Labels& labels, double value);
  void Observe(const std::string& name, const Labels& labels, double value);

  // Current value of a counter or gauge series (0 if absent); for tests and the summary line.
  double Value(const std::string& name, const Labels& labels) const;

  // Prometheus text format.
  std::string Render() const;

  // Latency buckets in seconds, 1 ms .. 120 s.
  static std::vector<double> LatencyBuckets();

 private:
  struct Series {
    double value = 0;               // counter / gauge
    std::vector<uint64_t> buckets;  // histogram: cumulative counts rendered at scrape
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    Type type = Type::kCounter;
    std::string help;
    std::vector<double> bounds;
    std::function<double()> read;
    std::map<std::string, Series> series;  // key: rendered label set "{a=\"b\"}"
  };
  Family& Find(const std::string& name, Type type);
  // Sets a family's type, help and scrape-time reader (null: its series come from Add/Set).
  void Declare(const std::string& name, const std::string& help, Type type,
               std::function<double()> read);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

// Renders {a="b",c="d"} with Prometheus escaping ("" for no labels).
std::string RenderLabels(const Labels& labels);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_METRICS_H_
