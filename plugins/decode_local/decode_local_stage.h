// DecodeLocalStage: generates the answer in this process from the prefilled (possibly
// compressed) cache, streaming text to the client as it is produced.
//
// Generates from state.last_logits at state.next_position with state.generation (sampling,
// limits, stop strings and tokens): in the host's shared decode batch when the context offers
// one (StageContext::batch_decoder(): siftd's continuous batching), else with sift::Generate on
// its own thread. Every non-empty piece of safe text goes to
// context.Emit; generation stops early when Emit returns false (client gone) or the request is
// cancelled. state.result gets the tokens, text, finish reason and decode time also when
// stopped early.
//
// Parameters: none (generation options are per request).
//
// THREADING: one instance per request (sift/stage.h).
// ERRORS:    FAILED_PRECONDITION without a prefilled cache; CANCELLED ("client_gone") when Emit
//            refused; the context's cancel status when cancelled or past the deadline.
#ifndef SIFT_PLUGINS_DECODE_LOCAL_DECODE_LOCAL_STAGE_H_
#define SIFT_PLUGINS_DECODE_LOCAL_DECODE_LOCAL_STAGE_H_

#include "sift/stage.h"

namespace sift::plugins {

class DecodeLocalStage : public Stage {
 public:
  DecodeLocalStage(const StageParams& params, const Model& model);
  Status Run(const Model& model, RequestState& state, StageContext& context) override;
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_DECODE_LOCAL_DECODE_LOCAL_STAGE_H_
