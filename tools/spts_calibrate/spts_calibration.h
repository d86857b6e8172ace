// SPTS offline calibration (paper §3.3, Eq. 9-12): builds the LTP low-rank proxy of every layer's
// FFN from calibration text.
//
// The calibration sequences run through the model layer by layer (all sequences through layer l,
// then l+1), so only one layer's saliencies are held at a time: for each layer the FFN inputs
// x = FfnNorm(h) of every calibration token give z(x) = |silu(x W_gate) * x W_up| (Eq. 9); the
// importance of channel j is the mean of its top ceil(rho |G|) saliencies (Eq. 10); the D_low most
// important channels are kept (Eq. 11) and each reduced projection is factorised by a rank-r SVD
// with the singular values folded into the right factor (Eq. 12).
//
// THREADING: single-threaded caller; LibTorch parallelises inside.
// ERRORS:    sift::Error for unreadable text folders, too little text or bad settings.
#ifndef SIFT_TOOLS_SPTS_CALIBRATE_SPTS_CALIBRATION_H_
#define SIFT_TOOLS_SPTS_CALIBRATE_SPTS_CALIBRATION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sift/model.h"
#include "spts_proxy.h"

namespace sift::spts {

struct CalibrationOptions {
  int64_t d_low = 256;
  int64_t rank = 64;
  double rho = 0.2;
  int64_t sequences = 32;  // calibration sequences
  int64_t seq_len = 256;   // tokens per sequence
  // Called with (what, done, total) as work progresses.
  std::function<void(const std::string&, int64_t, int64_t)> progress;
};

// Token sequences from the *.txt / *.md files under `folder` (sorted by path, recursively),
// tokenised and concatenated, cut into `sequences` windows of `seq_len` tokens spread evenly over
// the stream. *files receives the files used. Throws if there is not text for one window.
std::vector<std::vector<TokenId>> CalibrationSequences(const Model& model,
                                                       const std::string& folder,
                                                       const CalibrationOptions& options,
                                                       std::vector<std::string>* files);

// One layer's proxy from its FFN inputs ffn_inputs [|G|, hidden] (FfnNorm output, the calibration
// token set G): Eq. 9-12 with options.d_low, rank, rho.
plugins::SptsLayerProxy LayerProxy(const LayerWeights& weights, const at::Tensor& ffn_inputs,
                                   const CalibrationOptions& options);

// Builds the proxies from `sequences`. The header records the model, d_low, rank, rho and the
// calibration description `calibration` (caller-provided JSON: folder, files, counts).
plugins::SptsProxy Calibrate(const Model& model, const std::vector<std::vector<TokenId>>& sequences,
                             const CalibrationOptions& options, const nlohmann::json& calibration);

}  // namespace sift::spts

#endif  // SIFT_TOOLS_SPTS_CALIBRATE_SPTS_CALIBRATION_H_
