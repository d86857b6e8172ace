// GemFilter's token selection (GemFilter §3, App. D.1): pool the layer-r scores of the last
// query with a 1-D average pool (kernel 5, stride 1, zero padding counted, as the paper's
// avg_pool1d call), take the top-k, and return them in original order.
//
// Here the question span tokens[question_begin, n) is always kept (an addition to the paper,
// which ranks the whole prompt): the `budget` counts every kept token, question included, and the
// remaining budget − |question| slots go to the highest pooled scores among the context tokens
// [0, question_begin). Pooling runs over the whole score vector, as in the paper.
//
// THREADING: pure function.
// ERRORS:    throws sift::Error for a scores tensor that is not 1-D, budget < 1 or kernel < 1.
#ifndef SIFT_PLUGINS_GEMFILTER_GEM_SELECTION_H_
#define SIFT_PLUGINS_GEMFILTER_GEM_SELECTION_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace sift::plugins {

// scores: [n] (one per prompt token). Returns sorted indices into [0, n); when the prompt already
// fits (n <= budget) every index.
std::vector<int64_t> GemFilterSelect(const at::Tensor& scores, int64_t question_begin,
                                     int64_t budget, int64_t kernel);

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_GEMFILTER_GEM_SELECTION_H_
