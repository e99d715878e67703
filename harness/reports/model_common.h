// Pieces of the report model shared by the sweep, compare and bisect builders.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "harness/dump/compare.h"

namespace splitcheck {

// A dataset difference as the model's first_divergence object (without forward, layer
// and site, which the caller adds).
nlohmann::json diff_json(const TensorDiff& d);

// The model's provenance block: producer, version, revision, compiler, flags, backend.
nlohmann::json provenance_json(const std::string& backend);

// A case with every field the schema requires, empty or zero, for `key`.
nlohmann::json empty_case(const std::string& key, int64_t index);

}  // namespace splitcheck
