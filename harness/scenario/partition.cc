#include "harness/scenario/partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace splitcheck {

Result<Partition> Partition::make(std::vector<int> bounds, int layers) {
  if (bounds.size() < 2 || bounds.front() != 0 || bounds.back() != layers)
    return invalid_input(fmt::format("partition must start at 0 and end at {}", layers));
  for (size_t i = 1; i < bounds.size(); ++i) {
    if (bounds[i] <= bounds[i - 1])
      return invalid_input(fmt::format("partition bounds must increase strictly (got {} after {})",
                                       bounds[i], bounds[i - 1]));
  }
  std::vector<StageRange> ranges;
  for (size_t i = 1; i < bounds.size(); ++i) ranges.push_back({bounds[i - 1], bounds[i]});
  return from_ranges(std::move(ranges), layers);
}

Partition Partition::from_ranges(std::vector<StageRange> ranges, int layers) {
  Partition p;
  p.ranges_ = std::move(ranges);
  p.layers_ = layers;
  return p;
}

std::vector<int> Partition::cuts() const {
  std::vector<int> out;
  for (size_t s = 0; s + 1 < ranges_.size(); ++s) out.push_back(ranges_[s].end);
  return out;
}

std::string Partition::ownership_problem() const {
  std::vector<int> owners(static_cast<size_t>(std::max(layers_, 0)), 0);
  std::vector<int> outside;
  for (const StageRange& r : ranges_)
    for (int l = r.begin; l < r.end; ++l) {
      if (l < 0 || l >= layers_) {
        outside.push_back(l);
      } else {
        ++owners[l];
      }
    }
  // Runs of layers as "5" or "30-31".
  auto runs = [](const std::vector<int>& ls) {
    std::string out;
    for (size_t i = 0; i < ls.size();) {
      size_t j = i;
      while (j + 1 < ls.size() && ls[j + 1] == ls[j] + 1) ++j;
      out += fmt::format("{}{}", out.empty() ? "" : ", ",
                         i == j ? fmt::format("{}", ls[i]) : fmt::format("{}-{}", ls[i], ls[j]));
      i = j + 1;
    }
    return out;
  };
  std::vector<int> none, several;
  for (int l = 0; l < layers_; ++l) {
    if (owners[l] == 0) none.push_back(l);
    if (owners[l] > 1) several.push_back(l);
  }
  std::vector<std::string> problems;
  if (!none.empty())
    problems.push_back(fmt::format("layer{} {} {} owned by no stage", none.size() > 1 ? "s" : "",
                                   runs(none), none.size() > 1 ? "are" : "is"));
  if (!several.empty())
    problems.push_back(fmt::format("layer{} {} {} owned by more than one stage",
                                   several.size() > 1 ? "s" : "", runs(several),
                                   several.size() > 1 ? "are" : "is"));
  if (!outside.empty())
    problems.push_back(
        fmt::format("stages own layers outside 0-{}: {}", layers_ - 1, runs(outside)));
  for (size_t s = 1; problems.empty() && s < ranges_.size(); ++s) {
    if (ranges_[s].begin != ranges_[s - 1].end)
      problems.push_back(fmt::format("stage {} starts at layer {}, not where stage {} ends ({})", s,
                                     ranges_[s].begin, s - 1, ranges_[s - 1].end));
  }
  if (ranges_.empty()) problems.push_back("no stage");
  std::string out;
  for (const std::string& p : problems) out += (out.empty() ? "" : "; ") + p;
  return out;
}

Result<Partition> Partition::from_cuts(const std::vector<int>& cuts, int layers) {
  std::vector<int> b{0};
  b.insert(b.end(), cuts.begin(), cuts.end());
  b.push_back(layers);
  return make(std::move(b), layers);
}

std::string Partition::layout() const {
  std::string s;
  for (int i = 0; i < stages(); ++i)
    s += fmt::format("{}{}-{}", i ? "|" : "", ranges_[i].begin, ranges_[i].end);
  return s;
}

std::string Partition::key() const {
  if (stages() == 1) return "pp1";
  if (stages() == layers() && ownership_problem().empty()) return "every-layer";
  std::string s = "split";
  for (int c : cuts()) s += fmt::format("-{}", c);
  return s;
}

namespace {

void combinations(int first, int last, int k, std::vector<int>& cur,
                  std::vector<std::vector<int>>& out, size_t limit) {
  if (out.size() > limit) return;
  if (static_cast<int>(cur.size()) == k) {
    out.push_back(cur);
    return;
  }
  for (int c = first; c <= last; ++c) {
    cur.push_back(c);
    combinations(c + 1, last, k, cur, out, limit);
    cur.pop_back();
  }
}

// Greedy pairwise cover: repeatedly build a cut set of size k that covers the most
// uncovered pairs, taking candidates in ascending order (deterministic). Stops once it
// holds more than `cap` cut sets.
std::vector<std::vector<int>> pairwise_cover(int layers, int k, size_t cap = SIZE_MAX - 1) {
  std::set<std::pair<int, int>> uncovered;
  for (int a = 1; a < layers; ++a)
    for (int b = a + 1; b < layers; ++b) uncovered.insert({a, b});
  std::vector<std::vector<int>> out;
  if (k == 1) {
    for (int a = 1; a < layers; ++a) out.push_back({a});
    return out;
  }
  while (!uncovered.empty() && out.size() <= cap) {
    std::vector<int> cut{uncovered.begin()->first, uncovered.begin()->second};
    while (static_cast<int>(cut.size()) < k) {
      int best = -1, best_gain = -1;
      for (int c = 1; c < layers; ++c) {
        if (std::find(cut.begin(), cut.end(), c) != cut.end()) continue;
        int gain = 0;
        for (int x : cut) gain += uncovered.count({std::min(x, c), std::max(x, c)});
        if (gain > best_gain) {
          best_gain = gain;
          best = c;
        }
      }
      if (best < 0) break;
      cut.push_back(best);
    }
    std::sort(cut.begin(), cut.end());
    for (size_t i = 0; i < cut.size(); ++i)
      for (size_t j = i + 1; j < cut.size(); ++j) uncovered.erase({cut[i], cut[j]});
    out.push_back(cut);
  }
  return out;
}

// C(n, k), saturating at cap + 1: every intermediate C(n - k + i, i) is exact while it
// stays at most cap, and the product is formed in 128 bits.
uint64_t binomial(int64_t n, int64_t k, uint64_t cap) {
  if (k < 0 || n < 0 || k > n) return 0;
  k = std::min(k, n - k);
  unsigned __int128 c = 1;
  for (int64_t i = 1; i <= k; ++i) {
    c = c * static_cast<unsigned __int128>(n - k + i) / static_cast<unsigned __int128>(i);
    if (c > cap) return cap + 1;
  }
  return static_cast<uint64_t>(c);
}

// "all" resolved: exhaustive for pp <= 2 or up to kExhaustiveLimit partitions, else pairwise.
std::string resolved_mode(const PartitionSpec& spec, int layers) {
  if (spec.mode != "all") return spec.mode;
  if (spec.pp <= 2) return "exhaustive";
  return binomial(layers - 1, spec.pp - 1, kExhaustiveLimit) <= kExhaustiveLimit ? "exhaustive"
                                                                                 : "pairwise";
}

}  // namespace

uint64_t partition_count(const PartitionSpec& spec, int layers, uint64_t cap) {
  const std::string mode = resolved_mode(spec, layers);
  if (mode == "list") return std::min<uint64_t>(spec.cuts.size(), cap + 1);
  if (mode == "exhaustive") return binomial(layers - 1, spec.pp - 1, cap);
  if (mode == "pairwise")
    return std::min<uint64_t>(pairwise_cover(layers, spec.pp - 1, cap).size(), cap + 1);
  return 1;  // every-layer, balanced
}

Result<std::vector<Partition>> enumerate_partitions(const PartitionSpec& spec, int layers,
                                                    const FaultSet& faults) {
  if (spec.mode == "balanced" && faults.has("partition.remainder_dropped")) {
    // The historical planner: floor(L/pp) layers per stage, the remainder dropped.
    const int q = layers / spec.pp;
    std::vector<StageRange> ranges;
    for (int s = 0; s < spec.pp; ++s) ranges.push_back({s * q, (s + 1) * q});
    return std::vector<Partition>{Partition::from_ranges(std::move(ranges), layers)};
  }
  std::vector<std::vector<int>> cut_sets;
  const int k = spec.pp - 1;
  const std::string mode = resolved_mode(spec, layers);
  auto too_many = [&] {
    return invalid_input(
        fmt::format("/partitions/splits: {} over {} layers with pp {} gives more than {} "
                    "partitions",
                    mode, layers, spec.pp, kMaxPartitions));
  };
  if (mode == "list") {
    cut_sets = spec.cuts;
  } else if (mode == "exhaustive") {
    if (binomial(layers - 1, k, kMaxPartitions) > kMaxPartitions) return too_many();
    std::vector<int> cur;
    combinations(1, layers - 1, k, cur, cut_sets, SIZE_MAX - 1);
  } else if (mode == "pairwise") {
    cut_sets = pairwise_cover(layers, k, kMaxPartitions);
    if (cut_sets.size() > kMaxPartitions) return too_many();
  } else if (mode == "every-layer") {
    std::vector<int> cuts;
    for (int c = 1; c < layers; ++c) cuts.push_back(c);
    cut_sets.push_back(cuts);
  } else if (mode == "balanced") {
    std::vector<int> cuts;
    for (int s = 1; s < spec.pp; ++s)
      cuts.push_back(static_cast<int>((int64_t{layers} * s) / spec.pp));
    cut_sets.push_back(cuts);
  } else {
    return invalid_input("unknown partition mode '" + spec.mode + "'");
  }
  std::vector<Partition> out;
  for (const auto& cuts : cut_sets) {
    ASSIGN_OR_RETURN(Partition p, Partition::from_cuts(cuts, layers));
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace splitcheck
