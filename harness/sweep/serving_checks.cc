#include "harness/sweep/serving_checks.h"

#include <fmt/format.h>

#include <cstring>
#include <map>

#include "harness/engine/serving.h"
#include "kernels/batch.h"

namespace splitcheck {
namespace {

// The forward indices of `request` in a record's schedule, in execution order.
std::vector<int32_t> forwards_of(const RunRecord& record, int32_t request) {
  std::vector<int32_t> out;
  const Tensor* t = record.find("serving/schedule");
  if (t == nullptr) return out;
  const int32_t* d = t->data<int32_t>();
  for (int64_t i = 0; i < t->dim(0); ++i)
    if (d[i * 6 + 1] == request) out.push_back(d[i * 6 + 5]);
  return out;
}

bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0);
}

}  // namespace

std::optional<std::string> compare_records_exactly(const RunRecord& a, const RunRecord& b) {
  std::map<std::string, const Tensor*> by_path;
  for (const RecordEntry& e : b.entries()) by_path[e.path] = &e.tensor;
  size_t compared = 0;
  for (const RecordEntry& e : a.entries()) {
    if (e.path.rfind("stage_trace/", 0) == 0) continue;
    auto it = by_path.find(e.path);
    if (it == by_path.end()) return e.path + " missing";
    if (!same_tensor(e.tensor, *it->second)) return e.path + " differs";
    ++compared;
  }
  size_t other = 0;
  for (const RecordEntry& e : b.entries()) other += e.path.rfind("stage_trace/", 0) != 0;
  if (other != compared) return fmt::format("{} datasets against {}", compared, other);
  return std::nullopt;
}

std::optional<std::string> compare_request_alone(const RunRecord& batched, const RunRecord& alone,
                                                 int32_t request) {
  const std::vector<int32_t> fb = forwards_of(batched, request);
  const std::vector<int32_t> fa = forwards_of(alone, request);
  if (fb.empty()) return fmt::format("request {}: not in the batched schedule", request);
  if (fb.size() != fa.size())
    return fmt::format("request {}: {} forwards in the batch, {} alone", request, fb.size(),
                       fa.size());
  std::map<std::string, const Tensor*> batched_by_path;
  for (const RecordEntry& e : batched.entries()) batched_by_path[e.path] = &e.tensor;
  std::map<int32_t, int32_t> to_batched;
  for (size_t i = 0; i < fa.size(); ++i) to_batched[fa[i]] = fb[i];
  const std::string gen = "generation/" + std::to_string(request) + "/";
  const std::string spec = "spec/" + std::to_string(request) + "/";
  int64_t compared = 0;
  for (const RecordEntry& e : alone.entries()) {
    std::string path;
    if (e.path.rfind("forward/", 0) == 0) {
      const size_t slash = e.path.find('/', 8);
      const int32_t f = std::atoi(e.path.c_str() + 8);
      auto it = to_batched.find(f);
      if (it == to_batched.end()) continue;
      path = forward_path(it->second) + e.path.substr(slash + 1);
    } else if (e.path.rfind(gen, 0) == 0 || e.path.rfind(spec, 0) == 0) {
      path = e.path;
    } else {
      continue;
    }
    ++compared;
    auto b = batched_by_path.find(path);
    if (b == batched_by_path.end())
      return fmt::format("request {}: {} (alone: {}) missing in the batch", request, path, e.path);
    if (!same_tensor(*b->second, e.tensor))
      return fmt::format("request {}: {} differs from {} served alone", request, path, e.path);
  }
  if (compared == 0) return fmt::format("request {}: nothing compared", request);
  return std::nullopt;
}

Result<BatchInvariance> check_requests_alone(const Scenario& s, WeightSource& source,
                                             const ReferenceRun& batched) {
  BatchInvariance out;
  std::vector<std::string> names;
  for (const TensorSpec& t : model_tensor_specs(s.model)) names.push_back(t.name);
  ASSIGN_OR_RETURN(WeightStore weights, load_weights(source, names));
  ASSIGN_OR_RETURN(std::unique_ptr<ReferenceEngine> engine,
                   ReferenceEngine::create(
                       s.model, std::move(weights),
                       EngineOptions{s.capture_ids, s.dump_level, s.speculative.method, false}));
  const Tensor* schedule = batched.record.find("serving/schedule");
  if (schedule == nullptr) return internal_error("the batched run recorded no schedule");
  std::vector<ScheduleRow> rows;
  for (int64_t i = 0; i < schedule->dim(0); ++i) {
    const int32_t* d = schedule->data<int32_t>() + i * 6;
    rows.push_back(ScheduleRow{d[0], d[1], static_cast<ForwardKind>(d[2]), d[3], d[4], d[5]});
  }
  const std::map<int32_t, std::vector<int>> chunks = prefill_chunks(rows);
  out.checked = true;
  out.required = batch_invariant(backend_device(s.backend));
  for (size_t r = 0; r < batched.workload.prompts.size(); ++r) {
    const int32_t id = static_cast<int32_t>(r);
    ServingOptions subset;
    subset.ids = {id};
    subset.arrivals = {0};
    if (auto it = chunks.find(id); it != chunks.end()) subset.forced_chunks[id] = it->second;
    RunRecord alone;
    ASSIGN_OR_RETURN(GenerationSummary g,
                     run_serving_generation(s, *engine, DrafterHost{engine->weights()}, source,
                                            batched.workload, &alone, &subset));
    (void)g;
    ++out.requests;
    if (std::optional<std::string> d = compare_request_alone(batched.record, alone, id))
      (out.required ? out.differences : out.not_invariant).push_back(*d);
    else
      ++out.identical;
  }
  return out;
}

}  // namespace splitcheck
