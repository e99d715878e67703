#include "harness/sweep/cases.h"

#include <fmt/format.h>

namespace splitcheck {

Result<SweepCases> select_cases(const Scenario& s, int shard_index, int shard_count,
                                const std::string& filter) {
  ASSIGN_OR_RETURN(
      std::vector<Partition> all,
      enumerate_partitions(s.partitions, s.model.num_hidden_layers, FaultSet{s.faults}));
  SweepCases cases;
  cases.enumerated = all.size();
  for (size_t i = 0; i < all.size(); ++i) {
    if (shard_count > 0 && static_cast<int>(i % shard_count) != shard_index) continue;
    if (!filter.empty() && all[i].key().find(filter) == std::string::npos) continue;
    cases.partitions.push_back(all[i]);
    cases.index.push_back(static_cast<int64_t>(i));
  }
  if (!cases.partitions.empty()) return cases;
  std::string why;
  if (!filter.empty()) why = fmt::format("--filter \"{}\" matches none", filter);
  if (shard_count > 1)
    why += fmt::format("{}shard {}/{} holds none", why.empty() ? "" : " and ", shard_index,
                       shard_count);
  if (why.empty()) why = "the scenario enumerates none";
  return invalid_input(fmt::format("{}: {} of its {} split point(s): nothing to compare",
                                   s.source_path.empty() ? s.name : s.source_path, why,
                                   all.size()));
}

void index_cases(const SweepCases& taken, std::vector<CaseResult>& cases) {
  for (size_t i = 0; i < cases.size() && i < taken.index.size(); ++i)
    cases[i].index = taken.index[i];
}

}  // namespace splitcheck
