#include "chunkkv_stage.h"

namespace sift::plugins {

ChunkKvStage::ChunkKvStage(const StageParams& params) : SelectStageBase(params, Signal::kWindow) {
  ReadScoring(params, /*window=*/32, /*pooling=*/"none", /*kernel=*/7);
  chunk_size_ = params.GetInt("chunk_size", 10, 1, 4096);
  shared_indices_ = params.GetBool("shared_indices", false);
  chunk_score_ = ParseChunkScore(params.GetString("chunk_score", "sum", {"sum", "mean"}));
}

at::Tensor ChunkKvStage::ChoosePrefix(int64_t layer, const at::Tensor& scores, int64_t p,
                                      int64_t keep, int64_t heads,
                                      const at::TensorOptions& index_options) const {
  if (shared_indices_) {
    return SelectChunks(scores.sum(0, /*keepdim=*/true), chunk_size_, keep, chunk_score_)[0];
  }
  return SelectChunks(scores, chunk_size_, keep, chunk_score_);
}

}  // namespace sift::plugins
