#include "spts_calibration.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sift/error.h"

namespace sift::spts {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Rank-r factors of w [rows, cols] (fp32): w ~ u [rows, r] x v [r, cols], v carrying the
// singular values.
void Factorise(const at::Tensor& w, int64_t r, at::Tensor* u, at::Tensor* v) {
  auto [U, S, Vh] = at::linalg_svd(w, /*full_matrices=*/false);
  *u = U.narrow(1, 0, r).contiguous();
  *v = (S.narrow(0, 0, r).unsqueeze(1) * Vh.narrow(0, 0, r)).contiguous();
}

}  // namespace

plugins::SptsLayerProxy LayerProxy(const LayerWeights& w, const at::Tensor& ffn_inputs,
                                   const CalibrationOptions& options) {
  at::Tensor w_gate = w.w_gate.to(at::kFloat), w_up = w.w_up.to(at::kFloat);
  at::Tensor x = ffn_inputs.to(at::kFloat);
  at::Tensor z = at::silu(at::linear(x, w_gate)).mul_(at::linear(x, w_up)).abs_();  // Eq. 9
  const int64_t top =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(options.rho * z.size(0))));
  at::Tensor importance = std::get<0>(z.topk(top, 0)).mean(0);                            // Eq. 10
  at::Tensor channels = std::get<0>(std::get<1>(importance.topk(options.d_low)).sort());  // Eq. 11
  plugins::SptsLayerProxy p;
  p.channels = channels.to(at::kLong).contiguous();
  Factorise(w_gate.index_select(0, p.channels).t().contiguous(), options.rank, &p.gate_u,
            &p.gate_v);
  Factorise(w_up.index_select(0, p.channels).t().contiguous(), options.rank, &p.up_u, &p.up_v);
  Factorise(w.w_down.to(at::kFloat).index_select(1, p.channels).contiguous(), options.rank,
            &p.down_u, &p.down_v);
  return p;
}

std::vector<std::vector<TokenId>> CalibrationSequences(const Model& model,
                                                       const std::string& folder,
                                                       const CalibrationOptions& options,
                                                       std::vector<std::string>* files) {
  namespace fs = std::filesystem;
  SIFT_CHECK(fs::is_directory(folder), "calibration folder ", folder, " does not exist");
  std::vector<std::string> paths;
  for (const auto& entry : fs::recursive_directory_iterator(folder)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext == ".txt" || ext == ".md") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  SIFT_CHECK(!paths.empty(), "no .txt or .md files under ", folder);
  const int64_t need = options.sequences * options.seq_len;
  std::vector<TokenId> stream;
  files->clear();
  // Enough text for every window to be distinct where possible; at most ~4x what is needed.
  for (const std::string& p : paths) {
    std::vector<TokenId> ids = model.tokenizer().Encode(ReadFile(p), false);
    stream.insert(stream.end(), ids.begin(), ids.end());
    files->push_back(p);
    if (static_cast<int64_t>(stream.size()) >= 4 * need) break;
  }
  const int64_t total = static_cast<int64_t>(stream.size());
  SIFT_CHECK(total >= options.seq_len, "the calibration text has ", total,
             " tokens, fewer than one sequence of ", options.seq_len);
  std::vector<std::vector<TokenId>> out;
  const int64_t windows = std::max<int64_t>(1, options.sequences);
  const int64_t span = total - options.seq_len;
  for (int64_t i = 0; i < windows; ++i) {
    const int64_t begin = windows == 1 ? 0 : span * i / (windows - 1);
    out.emplace_back(stream.begin() + begin, stream.begin() + begin + options.seq_len);
  }
  return out;
}

plugins::SptsProxy Calibrate(const Model& model, const std::vector<std::vector<TokenId>>& sequences,
                             const CalibrationOptions& options, const nlohmann::json& calibration) {
  const ModelConfig& c = model.config();
  SIFT_CHECK(!sequences.empty(), "no calibration sequences");
  SIFT_CHECK(options.d_low >= 1 && options.d_low <= c.intermediate_size, "d_low ", options.d_low,
             " must be in [1, ", c.intermediate_size, "]");
  SIFT_CHECK(options.rank >= 1 && options.rank <= std::min(options.d_low, c.hidden_size), "rank ",
             options.rank, " must be in [1, min(d_low, hidden)]");
  SIFT_CHECK(options.rho > 0 && options.rho <= 1, "rho must be in (0, 1]");
  auto progress = [&](const std::string& what, int64_t done, int64_t total) {
    if (options.progress) options.progress(what, done, total);
  };

  // Token ids and RoPE positions live on the host (sift/model.h); Embed moves the ids over.
  const at::TensorOptions host_options = at::TensorOptions().dtype(at::kLong).device(at::kCPU);
  std::vector<at::Tensor> hidden, positions;
  int64_t tokens = 0;
  for (const auto& seq : sequences) {
    at::Tensor ids = at::tensor(std::vector<int64_t>(seq.begin(), seq.end()), host_options);
    hidden.push_back(model.Embed(ids));
    positions.push_back(at::arange(static_cast<int64_t>(seq.size()), host_options));
    tokens += static_cast<int64_t>(seq.size());
  }

  plugins::SptsProxy proxy;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    progress("layer", l, c.num_layers);
    const LayerWeights& w = model.weights().layers[l];
    std::vector<at::Tensor> inputs;
    for (size_t s = 0; s < hidden.size(); ++s) {
      at::Tensor& x = hidden[s];
      const at::Tensor& pos = positions[s];
      Model::Qkv qkv = model.ProjectQkv(l, model.AttnNorm(l, x));
      at::Tensor q = model.ApplyRope(qkv.q, pos), k = model.ApplyRope(qkv.k, pos);
      AttentionOptions a;
      a.upcast_fp32 = true;  // calibration numerics need not match serving; fp32 is faster here
      at::Tensor attn = Attention(q, k.transpose(0, 1), qkv.v.transpose(0, 1), pos, pos, a);
      x = x + model.OutputProjection(l, attn);
      at::Tensor h = model.FfnNorm(l, x);
      inputs.push_back(h.to(at::kFloat));
      x = x + model.Ffn(l, h);
    }
    plugins::SptsLayerProxy p = LayerProxy(w, at::cat(inputs, 0), options);
    proxy.layers.push_back(std::move(p));
  }
  progress("layer", c.num_layers, c.num_layers);
  proxy.header["model"] = {{"name", c.name},
                           {"file", std::filesystem::path(model.path()).filename().string()},
                           {"architecture", c.architecture},
                           {"num_layers", c.num_layers},
                           {"hidden_size", c.hidden_size},
                           {"intermediate_size", c.intermediate_size}};
  proxy.header["rho"] = options.rho;
  nlohmann::json cal = calibration;
  cal["sequences"] = static_cast<int64_t>(sequences.size());
  cal["tokens"] = tokens;
  proxy.header["calibration"] = cal;
  proxy.header["created_by"] = "sift-spts-calibrate";
  return proxy;
}

}  // namespace sift::spts
