// GPU properties: the same tokens through forwards of different row counts, compared bit
// for bit (properties.h).
#include "harness/lanes/properties.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "harness/engine/prepared_workload.h"
#include "harness/engine/run.h"
#include "reference/engine.h"

namespace splitcheck {
namespace {

// The lowest index of the row's largest value (NaN never wins).
int64_t row_argmax(const float* row, int64_t v) {
  int64_t best = 0;
  for (int64_t i = 1; i < v; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

// Logit rows of several forwards, stacked into one float32 [R, V] host tensor.
Tensor stack_rows(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  const int64_t v = parts.empty() ? 0 : parts.front().dim(1);
  for (const Tensor& p : parts) rows += p.dim(0);
  Tensor out = Tensor::zeros(DType::kF32, {rows, v});
  int64_t at = 0;
  for (const Tensor& p0 : parts) {
    const Tensor p = p0.to(Device::kCpu);
    std::memcpy(out.data<float>() + at * v, p.data<float>(),
                static_cast<size_t>(p.numel()) * sizeof(float));
    at += p.dim(0);
  }
  return out;
}

// Runs forwards on one engine, numbering them.
class Forwards {
 public:
  explicit Forwards(Engine& engine) : engine_(engine) {}
  // A forward of ids[begin, end) at positions begin.. ; its logits.
  Result<Tensor> run(const std::vector<int32_t>& ids, int64_t begin, int64_t end,
                     ForwardKind kind) {
    ForwardRequest r;
    r.ids.assign(ids.begin() + begin, ids.begin() + end);
    r.kind = kind;
    r.first_position = begin;
    r.index = index_++;
    ASSIGN_OR_RETURN(ForwardResult f, engine_.forward(r, nullptr));
    return f.logits.to(Device::kCpu);
  }
  // Decodes ids[begin, end) one token a forward; their logits, stacked.
  Result<Tensor> decode(const std::vector<int32_t>& ids, int64_t begin, int64_t end) {
    std::vector<Tensor> rows;
    for (int64_t t = begin; t < end; ++t) {
      ASSIGN_OR_RETURN(Tensor l, run(ids, t, t + 1, ForwardKind::kDecode));
      rows.push_back(std::move(l));
    }
    return stack_rows(rows);
  }
  void reset() { engine_.reset_sequence(); }

 private:
  Engine& engine_;
  int32_t index_ = 0;
};

}  // namespace

Result<RowsDifference> compare_logit_rows(const Tensor& a0, const Tensor& b0) {
  if (a0.dtype() != DType::kF32 || b0.dtype() != DType::kF32 || a0.shape().size() != 2 ||
      a0.shape() != b0.shape())
    return internal_error("compare_logit_rows: two float32 [R, V] tensors of one shape");
  const Tensor a = a0.to(Device::kCpu), b = b0.to(Device::kCpu);
  RowsDifference d;
  d.rows = a.dim(0);
  const int64_t v = a.dim(1);
  d.elements = d.rows * v;
  for (int64_t r = 0; r < d.rows; ++r) {
    const float* x = a.data<float>() + r * v;
    const float* y = b.data<float>() + r * v;
    int64_t differing = 0;
    for (int64_t i = 0; i < v; ++i) {
      if (std::memcmp(&x[i], &y[i], sizeof(float)) == 0) continue;
      ++differing;
      const double diff = std::fabs(static_cast<double>(x[i]) - static_cast<double>(y[i]));
      if (!std::isnan(diff)) d.max_abs_diff = std::max(d.max_abs_diff, diff);
    }
    d.elements_differing += differing;
    if (differing > 0) ++d.rows_differing;
    if (v > 0 && row_argmax(x, v) != row_argmax(y, v)) ++d.argmax_changed;
  }
  return d;
}

Result<PropertyReport> measure_properties(const Scenario& s) {
  ASSIGN_OR_RETURN(PreparedWorkload workload, prepare_workload(s));
  if (workload.prompts.empty() || workload.prompts.front().size() < 2)
    return invalid_input(
        fmt::format("{}: /workload: the properties need a first prompt of at "
                    "least 2 tokens",
                    s.source_path.empty() ? s.name : s.source_path));
  const std::vector<int32_t>& ids = workload.prompts.front();
  PropertyReport report;
  report.scenario = s.name;
  report.backend = s.backend;
  const auto t = static_cast<int64_t>(ids.size());
  const int64_t h = t / 2;
  report.prompt_tokens = t;
  report.split_at = h;
  report.gamma = static_cast<int>(std::min<int64_t>(std::max(s.speculative.gamma, 1), t - h - 1));
  const int64_t m = report.gamma + 1;
  report.chunk =
      static_cast<int>(s.prefill_chunk > 0 && s.prefill_chunk < t ? s.prefill_chunk : (t + 3) / 4);

  // Through the scenario's weight source, so a GPU scenario generates its weights on its
  // device (k3-shape: 79.5 GiB, minutes on the host).
  std::unique_ptr<WeightSource> source = scenario_weight_source(s);
  std::vector<std::string> names;
  for (const TensorSpec& spec : model_tensor_specs(s.model)) names.push_back(spec.name);
  ASSIGN_OR_RETURN(WeightStore weights, load_weights(*source, names));
  RETURN_IF_ERROR(check_weights_on_backend(weights, s.backend));
  ASSIGN_OR_RETURN(std::unique_ptr<ReferenceEngine> engine,
                   ReferenceEngine::create(s.model, std::move(weights),
                                           EngineOptions{{}, DumpLevel::kSummary, "none", false}));
  Forwards f(*engine);

  // One prefill of all T tokens.
  ASSIGN_OR_RETURN(Tensor whole, f.run(ids, 0, t, ForwardKind::kPrefill));
  // A prefill of h tokens, then the rest decoded one at a time.
  f.reset();
  RETURN_IF_ERROR(f.run(ids, 0, h, ForwardKind::kPrefill).status());
  ASSIGN_OR_RETURN(Tensor decoded, f.decode(ids, h, t));
  // A prefill of h tokens, then one verify forward of gamma + 1 rows.
  f.reset();
  RETURN_IF_ERROR(f.run(ids, 0, h, ForwardKind::kPrefill).status());
  ASSIGN_OR_RETURN(Tensor verified, f.run(ids, h, h + m, ForwardKind::kVerify));
  // The prefill in chunks.
  f.reset();
  std::vector<Tensor> chunks;
  for (int64_t b = 0; b < t; b += report.chunk) {
    ASSIGN_OR_RETURN(Tensor l,
                     f.run(ids, b, std::min<int64_t>(b + report.chunk, t), ForwardKind::kPrefill));
    chunks.push_back(std::move(l));
  }
  const Tensor chunked = stack_rows(chunks);

  ASSIGN_OR_RETURN(RowsDifference a, compare_logit_rows(whole.rows(h, t).clone(), decoded));
  report.rows.push_back(
      {"decode_vs_prefill",
       fmt::format("rows {}..{} of one prefill of {} tokens vs the same tokens decoded one at a "
                   "time after a prefill of {}",
                   h, t - 1, t, h),
       a});
  ASSIGN_OR_RETURN(RowsDifference b, compare_logit_rows(verified, decoded.rows(0, m).clone()));
  report.rows.push_back(
      {"verify_vs_decode",
       fmt::format("one verify forward of {} rows (gamma {} + 1) vs the same tokens decoded one "
                   "at a time, both after a prefill of {}",
                   m, report.gamma, h),
       b});
  ASSIGN_OR_RETURN(RowsDifference c, compare_logit_rows(chunked, whole));
  report.rows.push_back(
      {"chunked_vs_whole",
       fmt::format("a prefill of {} tokens in chunks of {} vs one prefill", t, report.chunk), c});
  return report;
}

nlohmann::json properties_json(const PropertyReport& r) {
  nlohmann::json j;
  j["scenario"] = r.scenario;
  j["backend"] = r.backend;
  j["provenance"] = backend_provenance(r.backend);
  j["prompt_tokens"] = r.prompt_tokens;
  j["split_at"] = r.split_at;
  j["gamma"] = r.gamma;
  j["chunk"] = r.chunk;
  j["properties"] = nlohmann::json::array();
  for (const PropertyRow& p : r.rows) {
    const RowsDifference& d = p.difference;
    nlohmann::json row;
    row["name"] = p.name;
    row["description"] = p.description;
    row["rows"] = d.rows;
    row["rows_differing"] = d.rows_differing;
    row["fraction_rows_differing"] =
        d.rows > 0 ? static_cast<double>(d.rows_differing) / static_cast<double>(d.rows) : 0.0;
    row["elements"] = d.elements;
    row["elements_differing"] = d.elements_differing;
    row["fraction_elements_differing"] =
        d.elements > 0 ? static_cast<double>(d.elements_differing) / static_cast<double>(d.elements)
                       : 0.0;
    row["argmax_changed"] = d.argmax_changed;
    row["max_abs_diff"] = d.max_abs_diff;
    row["identical"] = d.identical();
    j["properties"].push_back(std::move(row));
  }
  return j;
}

}  // namespace splitcheck
