// RunRecord: the in-memory form of a dump (DESIGN.md, the dump format).
//
// Engines append tensors in execution order under their dump paths
// ("forward/3/layers/12/pre_attn") and set attributes on groups; harness/ writes a record
// to HDF5 or compares two records without touching disk. The entry order is the
// dataset `order` of the dump.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
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

// Where a tensor left in a file lives: a large dataset of a dump loaded for comparison
// (harness/runner/engine_dump.h) keeps only this and its dtype and shape, so memory does
// not grow with the dump. A comparator reads `dataset` of `file` in blocks and checks the
// bytes against `digest`, the digest the file carried when it was loaded, as it reads.
struct StoredTensor {
  std::string file;
  std::string dataset;  // "/forward/0/layers/0/pre_attn"
  std::string digest;   // "xxh3:..."
};

struct RecordEntry {
  std::string path;
  // The tensor; when `stored` is set, its dtype and shape only (no data).
  Tensor tensor;
  std::optional<StoredTensor> stored;
};

class RunRecord {
 public:
  // Adds a dataset; a tensor on a device is copied to the host first.
  void add(std::string path, Tensor tensor) {
    if (tensor.device() != Device::kCpu) tensor = tensor.to(Device::kCpu);
    RecordEntry e;
    e.path = std::move(path);
    e.tensor = std::move(tensor);
    entries_.push_back(std::move(e));
  }
  // Adds a dataset whose bytes stay in a file: `shape_only` carries its dtype and shape.
  void add_stored(std::string path, Tensor shape_only, StoredTensor where) {
    RecordEntry e;
    e.path = std::move(path);
    e.tensor = std::move(shape_only);
    e.stored = std::move(where);
    entries_.push_back(std::move(e));
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
