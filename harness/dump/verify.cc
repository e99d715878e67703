#include "harness/dump/verify.h"

#include <algorithm>
#include <vector>

#include "harness/dump/blocks.h"
#include "harness/dump/digest.h"
#include "harness/dump/dump.h"

namespace splitcheck {

Result<DumpIntegrity> verify_dump(const std::string& path, size_t chunk_bytes) {
  ASSIGN_OR_RETURN(DumpReader reader, DumpReader::open(path));
  ASSIGN_OR_RETURN(DumpIntegrity out, verify_dump_layout(reader));
  std::vector<std::byte> buffer;
  for (const DatasetInfo& d : reader.datasets()) {
    DatasetDigestCheck check(path, d.path, d.digest);
    RETURN_IF_ERROR(for_each_block(d.shape, dtype_size(d.dtype), std::max<size_t>(chunk_bytes, 16),
                                   [&](const SlabBlock& blk) -> Status {
                                     RETURN_IF_ERROR(
                                         reader.read_slab(d.path, blk.start, blk.count, buffer));
                                     check.update(buffer);
                                     out.bytes += static_cast<int64_t>(buffer.size());
                                     return Status::ok();
                                   }));
    RETURN_IF_ERROR(check.finish());
  }
  return out;
}

Result<DumpIntegrity> verify_dump_layout(DumpReader& reader) {
  const std::string& path = reader.path();
  DumpIntegrity out;
  // A sound file numbers its n datasets 0..n-1 once each: every order in range, and no
  // two equal (datasets() is sorted by order, ties by path, so equal ones are adjacent).
  const std::vector<DatasetInfo>& datasets = reader.datasets();
  const int64_t n = static_cast<int64_t>(datasets.size());
  for (const DatasetInfo& d : datasets)
    if (d.order < 0 || d.order >= n)
      return invalid_input(path + ": dataset " + d.path + ": order " + std::to_string(d.order) +
                           " is outside 0.." + std::to_string(n - 1) +
                           " (orders must number the datasets 0..n-1, once each)");
  for (size_t i = 1; i < datasets.size(); ++i)
    if (datasets[i].order == datasets[i - 1].order)
      return invalid_input(path + ": dataset " + datasets[i].path + ": order " +
                           std::to_string(datasets[i].order) + " is also the order of " +
                           datasets[i - 1].path);
  for (const DatasetInfo& d : datasets) {
    if (d.digest.empty())
      return invalid_input(path + ": dataset " + d.path + ": carries no digest attribute");
    ++out.datasets;
  }
  for (const std::string& object : reader.objects()) {
    ASSIGN_OR_RETURN(auto attrs, reader.attributes(object));
    out.attributes += static_cast<int64_t>(attrs.size());
    ++out.objects;
  }
  return out;
}

}  // namespace splitcheck
