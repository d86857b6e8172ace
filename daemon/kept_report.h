// KeptReport: what a request's pipeline kept, for people to read (the `return_kept` option of
// SIFT/1 and of the OpenAI API's `sift` extension; docs/protocol.md "What was kept").
//
// Built from the request state the first decode stage receives, so it shows the cache every
// compression stage left and nothing decode appended:
//   {"prompt_tokens": N,        the prompt as received
//    "tokens": n,               the prompt the cache was built from (n < N after a filter)
//    "filtered_prompt": "...",  only when a filter replaced the prompt: those n tokens as text
//    "layers": [{"first": a, "last": b,             consecutive layers that kept the same
//                "heads": [[[begin, end], ...], ...]}]}  per KV head, the kept positions as
//                                                   half-open ranges of token indices into the n
// A state without a cache (no prefill ran) has "layers": [].
//
// THREADING: a function of its arguments. ERRORS: none (a state it cannot read gives "layers": []).
#ifndef SIFT_DAEMON_KEPT_REPORT_H_
#define SIFT_DAEMON_KEPT_REPORT_H_

#include <nlohmann/json.hpp>

#include "sift/model.h"
#include "sift/request_state.h"

namespace sift::daemon {

nlohmann::json KeptReport(const RequestState& state, const Model& model);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_KEPT_REPORT_H_
