// RunRecord: the in-memory form of a dump (DESIGN.md, the dump format).
//
// Engines append tensors in execution order under their dump paths
// ("forward/3/layers/12/pre_attn") and set attributes on groups; harness/ writes a record
// to HDF5 or compares two records without touching disk. The entry order is the
// dataset `order` of the dump.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "kernels/tensor.h"

namespace splitcheck {

// What a dump holds: summary (tokens, taps, logits, dispatch), layer (adds per-layer
// tensors, the bank and the output read), full (adds the attention caches per forward).
enum class DumpLevel { kSummary, kLayer, kFull };
const char* dump_level_name(DumpLevel level);

using AttrValue = std::variant<int64_t, double, std::string>;

struct RecordEntry {
  std::string path;
  Tensor tensor;
};

class RunRecord {
 public:
  // Adds a dataset; a tensor on a device is copied to the host first.
  void add(std::string path, Tensor tensor) {
    if (tensor.device() != Device::kCpu) tensor = tensor.to(Device::kCpu);
    entries_.push_back(RecordEntry{std::move(path), std::move(tensor)});
  }
  void set_attr(const std::string& object, const std::string& name, AttrValue value) {
    attrs_[object][name] = std::move(value);
  }
  const std::vector<RecordEntry>& entries() const { return entries_; }
  std::vector<RecordEntry>& entries() { return entries_; }
  const std::map<std::string, std::map<std::string, AttrValue>>& attrs() const { return attrs_; }
  const Tensor* find(const std::string& path) const;
  // Appends all of `other` (entries and attributes) after this record's.
  void append(const RunRecord& other);

 private:
  std::vector<RecordEntry> entries_;
  std::map<std::string, std::map<std::string, AttrValue>> attrs_;
};

}  // namespace splitcheck
