#include "harness/scenario/suggest.h"

#include <algorithm>
#include <cctype>

namespace splitcheck {
namespace {

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

// Optimal string alignment distance: Levenshtein plus the swap of two neighbours.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
          lower(a[i - 2]) == lower(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string nearest_name(std::string_view name, const std::vector<std::string_view>& candidates) {
  const size_t limit = name.size() <= 4 ? 1 : name.size() / 3;
  std::string_view best;
  size_t best_distance = limit + 1;
  for (std::string_view c : candidates) {
    const size_t d = edit_distance(name, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  return std::string(best);
}

std::string did_you_mean(std::string_view name, const std::vector<std::string_view>& candidates) {
  const std::string near = nearest_name(name, candidates);
  return near.empty() ? "" : "; did you mean \"" + near + "\"?";
}

}  // namespace splitcheck
