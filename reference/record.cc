#include "reference/record.h"

namespace splitcheck {

const char* dump_level_name(DumpLevel level) {
  switch (level) {
    case DumpLevel::kSummary:
      return "summary";
    case DumpLevel::kLayer:
      return "layer";
    case DumpLevel::kFull:
      return "full";
  }
  return "?";
}

const Tensor* RunRecord::find(const std::string& path) const {
  for (const RecordEntry& e : entries_)
    if (e.path == path) return &e.tensor;
  return nullptr;
}

void RunRecord::append(const RunRecord& other) {
  for (const RecordEntry& e : other.entries_) entries_.push_back(e);
  for (const auto& [obj, m] : other.attrs_)
    for (const auto& [k, v] : m) attrs_[obj][k] = v;
}

}  // namespace splitcheck
