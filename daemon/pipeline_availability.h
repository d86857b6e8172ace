// Pipeline availability: whether a valid pipeline can run on the loaded model, said before a
// request does (issue 29). A pipeline that validates may still need a file made for the model;
// the catalog lists it with "available": false and the reason (the SIFT/1 `list` reply and the
// OpenAI /v1/models, docs/protocol.md and docs/openai.md), and keeps serving it, so a request
// that brings what is missing (e.g. a `proxy` override) still runs.
//
// Today one case: an SPTS prefill (plugin prefill_skip) with LTP on (ltp not false) needs its
// calibrated proxies, the `proxy` parameter or else <model path without .gguf>.spts.bin, a
// relative path resolved against the model's folder (the rule of
// plugins/prefill_skip/prefill_skip_stage.h ResolveProxyPath). The reason names the command
// that makes the file.
//
// THREADING: pure function (reads the file system). ERRORS: none; returns "" when available.
#ifndef SIFT_DAEMON_PIPELINE_AVAILABILITY_H_
#define SIFT_DAEMON_PIPELINE_AVAILABILITY_H_

#include <string>
#include <vector>

#include "daemon/pipeline_config.h"

namespace sift::daemon {

// Why `stages` (validated, the model's defaults applied) cannot run on a model loaded from
// `model_path`; "" when they can.
std::string PipelineUnavailable(const std::vector<ResolvedStage>& stages,
                                const std::string& model_path);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_PIPELINE_AVAILABILITY_H_
