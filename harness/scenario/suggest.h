// "Did you mean": the known name nearest a misspelt one, for the messages that refuse an
// unknown scenario key or engine placeholder (`/partitons: unknown key; did you mean
// "partitions"?`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace splitcheck {

// The candidate nearest `name` by edit distance (insertions, deletions, substitutions and
// swaps of two neighbours, case ignored), when it is near enough to be a typo: at most one
// edit for names up to four characters, else at most a third of the name's length. Empty
// when none is; the first in `candidates` order on a tie.
std::string nearest_name(std::string_view name, const std::vector<std::string_view>& candidates);

// "; did you mean \"partitions\"?" for nearest_name's answer, "" when there is none.
std::string did_you_mean(std::string_view name, const std::vector<std::string_view>& candidates);

}  // namespace splitcheck
