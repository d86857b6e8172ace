#include "spts_schedule.h"

#include <algorithm>
#include <cmath>

#include "sift/error.h"

namespace sift::plugins {
namespace {

int64_t Tokens(double value, bool fraction, int64_t n) {
  const double t = fraction ? std::llround(value * static_cast<double>(n)) : value;
  return std::max<int64_t>(1, static_cast<int64_t>(t));
}

}  // namespace

void SptsSchedule::Validate(const SptsSettings& s, int64_t num_layers) {
  SIFT_CHECK(s.skip_start >= 0 && s.skip_start <= num_layers, "skip_start ", s.skip_start,
             " is outside [0, ", num_layers, "]");
  SIFT_CHECK(s.budgets.size() == s.stage_ends.size(), "budgets has ", s.budgets.size(),
             " entries but stage_ends has ", s.stage_ends.size());
  int64_t prev = s.skip_start - 1;
  for (int64_t end : s.stage_ends) {
    SIFT_CHECK(end > prev && end < num_layers, "stage_ends must increase, start at or after ",
               "skip_start and stay below ", num_layers, " (got ", end, ")");
    prev = end;
  }
  for (double b : s.budgets) {
    SIFT_CHECK(b > 0 && (!s.fractions || b <= 1.0), "budget ", b, " must be ",
               s.fractions ? "in (0, 1]" : "positive");
  }
  SIFT_CHECK(s.prune_margin >= 0 && (!s.fractions || s.prune_margin < 1.0), "prune_margin ",
             s.prune_margin, " must be ", s.fractions ? "in [0, 1)" : ">= 0");
  SIFT_CHECK(s.floor >= 0, "floor ", s.floor, " must be >= 0");
}

std::vector<SptsLayerPlan> SptsSchedule::Make(const SptsSettings& s, int64_t num_layers,
                                              int64_t n) {
  Validate(s, num_layers);
  std::vector<SptsLayerPlan> plans(num_layers);
  const int64_t stages = static_cast<int64_t>(s.stage_ends.size());
  int64_t candidates = n;
  int64_t stage = 0;
  int64_t tail_budget = n;
  if (stages > 0) {
    tail_budget = std::max<int64_t>(
        s.floor, std::max<int64_t>(1, Tokens(s.budgets.back(), s.fractions, n) -
                                          (s.fractions ? std::llround(s.prune_margin * n)
                                                       : static_cast<int64_t>(s.prune_margin))));
  }
  const bool dense = n <= s.floor;  // at or below the floor nothing is skipped
  for (int64_t l = 0; l < num_layers; ++l) {
    SptsLayerPlan& p = plans[l];
    p.candidates = candidates;
    if (l < s.skip_start || stages == 0 || dense) {
      p.active = candidates;
      continue;
    }
    p.skip = true;
    p.stage = stage;
    if (stage < stages) {
      const int64_t budget = std::max(s.floor, Tokens(s.budgets[stage], s.fractions, n));
      p.active = std::min(candidates, budget);
      if (l == s.stage_ends[stage]) {
        if (s.msdp) {
          const int64_t margin =
              s.fractions ? std::llround(s.prune_margin * n) : static_cast<int64_t>(s.prune_margin);
          p.prune_to = std::min(candidates, std::max({int64_t{1}, s.floor, budget - margin}));
          candidates = p.prune_to;
        }
        ++stage;
      }
    } else {
      p.active = s.msdp ? candidates : std::min(candidates, tail_budget);
    }
  }
  return plans;
}

}  // namespace sift::plugins
