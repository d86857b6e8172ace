#include "decode_local_stage.h"

#include <string>

#include "sift/batch_engine.h"
#include "sift/generate.h"

namespace sift::plugins {

DecodeLocalStage::DecodeLocalStage(const StageParams& params, const Model& model) {}

Status DecodeLocalStage::Run(const Model& model, RequestState& state, StageContext& context) {
  if (state.cache == nullptr || !state.last_logits.defined()) {
    return Status(StatusCode::kFailedPrecondition, "no_prefill",
                  "decode_local needs a prefilled cache: put a prefill stage before it");
  }
  if (!model.has_tokenizer()) {
    return Status(StatusCode::kFailedPrecondition, "no_tokenizer",
                  "decode_local needs a model with a tokenizer");
  }
  bool client_gone = false;
  auto on_piece = [&](const std::string& piece, TokenId token) {
    if (context.Cancelled()) return false;
    if (piece.empty()) return true;
    if (!context.Emit(piece, token)) client_gone = true;
    return !client_gone;
  };
  if (BatchDecoder* batch = context.batch_decoder()) {
    state.result = batch->Decode(model, *state.cache, state.last_logits, state.next_position,
                                 state.generation, on_piece);
  } else {
    state.result = Generate(model, *state.cache, state.last_logits, state.next_position,
                            state.generation, on_piece);
  }
  if (context.Cancelled()) return context.CancelStatus();
  if (client_gone) {
    return Status(StatusCode::kCancelled, "client_gone", "the client stopped receiving text");
  }
  return Status::Ok();
}

}  // namespace sift::plugins
