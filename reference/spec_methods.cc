#include "reference/spec_methods.h"

#include <algorithm>

namespace splitcheck {
namespace {

std::vector<int> normalise(std::vector<int> ids, int layers) {
  for (int& id : ids) id = std::clamp(id, 0, layers);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

// SPEC 3.1: on and off block boundaries, one through the output weights (0, 7, 16, 25,
// 32 for k3-tiny).
std::vector<int> dspark_ids(int layers) {
  return normalise({0, layers / 4 - 1, layers / 2, 3 * layers / 4 + 1, layers}, layers);
}

// SPEC 3.2: low, middle and high features (2, 16, 29 for k3-tiny).
std::vector<int> eagle3_ids(int layers) { return normalise({2, layers / 2, layers - 3}, layers); }

const SpecMethodInfo kMethods[] = {
    {"none", false, false, false, dspark_ids},
    {"dspark", true, true, true, dspark_ids},
    {"eagle3", true, true, false, eagle3_ids},
};

}  // namespace

std::span<const SpecMethodInfo> spec_method_registry() { return kMethods; }

const SpecMethodInfo* find_spec_method(std::string_view name) {
  for (const SpecMethodInfo& m : kMethods)
    if (m.name == name) return &m;
  return nullptr;
}

std::vector<int> method_default_capture_ids(std::string_view method, int layers) {
  const SpecMethodInfo* m = find_spec_method(method);
  return m != nullptr ? m->default_capture_ids(layers) : dspark_ids(layers);
}

bool last_stage_holds_embedding_copy(std::string_view method, bool is_last, bool is_first,
                                     bool context_only_producer) {
  const SpecMethodInfo* m = find_spec_method(method);
  if (m == nullptr || !m->has_drafter || !m->shares_target_embedding) return false;
  return is_last && !is_first && !context_only_producer;
}

}  // namespace splitcheck
