// The dump format (DESIGN.md, "The dump format"): one HDF5 file per run.
//
// Root attributes identify the run (format, format_version, scenario, hashes,
// partition, backend, producer, env, level, created, volatile). Every dataset carries
// `order` (its place in execution order, from 0) and `digest` ("xxh3:..." of its raw
// bytes; "xxh64:..." in format_version 1); bfloat16 is stored as uint16 with `dtype = "bfloat16"`,
// float32, int32 and (outside engines) IEEE float16 as themselves with `dtype = "float32"` /
// `"int32"` / `"float16"`. A dataset a writer narrowed (float32 stored as bf16) names the
// dtype it was computed in as `source_dtype`.
//
// Files are byte-deterministic: equal content and equal volatile attributes give equal
// bytes (no object timestamps, fixed file-format version, fixed-length strings).
//
//   ASSIGN_OR_RETURN(DumpWriter w, DumpWriter::create(path, header));
//   RETURN_IF_ERROR(w.write("/forward/0/logits", logits));
//   RETURN_IF_ERROR(w.finish());   // only now does `path` appear
//
//   ASSIGN_OR_RETURN(DumpReader r, DumpReader::open(path));
//   for (const DatasetInfo& d : r.datasets()) ...  // in execution order
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/status.h"
#include "kernels/tensor.h"
#include "reference/partial_files.h"

namespace splitcheck {

// The value of the root attribute `format`, the `format_version` this build writes, and
// the oldest it reads. Version 2 moved dataset digests from XXH64 to XXH3-64 (nothing
// else changed); version 1 dumps (older builds, tools/splitcheck_dump.py) are read and
// their XXH64 digests checked as before.
inline constexpr const char* kDumpFormat = "splitcheck.dump";
inline constexpr int64_t kDumpFormatVersion = 2;
inline constexpr int64_t kDumpFormatVersionOldest = 1;

// Upper bounds on what a reader allocates from a file's metadata. An attribute (its
// elements x element size, or the text of its variable-length strings) holds at most
// kMaxAttributeBytes; a dataset's shape may describe at most kMaxDatasetBytes (checked
// for overflow axis by axis). A file past either is refused (kInvalidInput naming the
// file and the object) before anything is allocated for it.
inline constexpr size_t kMaxAttributeBytes = size_t{16} << 20;
inline constexpr size_t kMaxDatasetBytes = size_t{1} << 40;

// The root attributes of a dump. `created` is written as the current UTC time
// (ISO 8601) when left empty; tests set it to get byte-identical files.
struct DumpHeader {
  std::string scenario_json;
  std::string scenario_sha256;
  std::string model_sha256;
  std::string partition;  // "0-12|12-32"
  std::string backend;
  std::string producer_json;
  std::string env_json;
  std::string level;  // summary | layer | full
  std::string created;
  // Names of the root attributes a comparison ignores, comma separated.
  std::string volatile_attrs = "created,partition,producer,env";
  // Read back from the file by DumpReader; a writer always writes kDumpFormatVersion.
  int64_t format_version = kDumpFormatVersion;
};

// Writes one dump. The file is built at `path + ".partial"` and renamed to `path` by
// finish(), so a reader never sees half a dump at `path`; destroying a writer that was
// not finished removes the partial file. Move-only.
class DumpWriter {
 public:
  // Creates `path + ".partial"` (replacing any stale one) and writes the root
  // attributes. With `compress`, datasets are chunked with shuffle + deflate(4).
  static Result<DumpWriter> create(const std::string& path, const DumpHeader& header,
                                   bool compress = false);

  DumpWriter(DumpWriter&& other) noexcept;
  DumpWriter& operator=(DumpWriter&& other) noexcept;
  DumpWriter(const DumpWriter&) = delete;
  DumpWriter& operator=(const DumpWriter&) = delete;
  ~DumpWriter();

  // Writes `t` at `dataset_path` (e.g. "/forward/0/layers/3/pre_attn"), creating the
  // groups above it, with attributes dtype, order (the next in write order) and digest.
  // Writing a path twice is an error.
  Status write(const std::string& dataset_path, const Tensor& t);

  // Sets an attribute on a group or dataset (the root is "/"), creating the group when
  // nothing exists at `object_path`; an existing attribute of that name is replaced.
  Status set_attr(const std::string& object_path, const std::string& name,
                  const std::string& value);
  Status set_attr(const std::string& object_path, const std::string& name, const char* value) {
    return set_attr(object_path, name, std::string(value));
  }
  Status set_attr(const std::string& object_path, const std::string& name, double value);
  template <std::integral T>
  requires(!std::same_as<T, bool>) Status
      set_attr(const std::string& object_path, const std::string& name, T value) {
    return set_int_attr(object_path, name, static_cast<int64_t>(value));
  }

  // Closes the file and renames it to its final path. The writer is spent afterwards.
  Status finish();

  // The final path (without ".partial").
  const std::string& path() const { return path_; }

 private:
  DumpWriter() = default;
  Status set_int_attr(const std::string& object_path, const std::string& name, int64_t value);
  Result<int64_t> open_or_create_object(const std::string& object_path);
  Status ensure_groups(const std::string& group_path);
  void abandon();

  std::string path_;
  std::string partial_path_;
  std::optional<PartialFile> removed_on_interrupt_;  // partial_path_, while it is written
  int64_t file_ = -1;                                // hid_t
  bool compress_ = false;
  int64_t next_order_ = 0;
};

// One dataset of a dump, as listed by DumpReader::datasets().
struct DatasetInfo {
  std::string path;  // "/forward/0/logits"
  DType dtype = DType::kF32;
  Shape shape;
  int64_t order = 0;
  std::string digest;  // "xxh3:..." ("xxh64:..." in version 1), or empty when none
  size_t nbytes = 0;
  // The dtype the engine computed the values in when the writer narrowed them (attribute
  // `source_dtype`: "float32" for float32 stored as bf16); empty when stored as computed.
  std::string source_dtype;
};

// One attribute's value in a form that compares exactly: `type` is "string", "integer",
// "float", "empty" or a description of another fixed-size type; `text` is the value
// (a string as itself, numbers in decimal, floats with 17 significant digits, arrays as
// "[a, b]", other types as the hex of their bytes).
struct AttributeValue {
  std::string type;
  std::string text;
  bool operator==(const AttributeValue&) const = default;
};

// Reads a dump. Opening validates the file (HDF5, `format`, `format_version`, every
// dataset's type and `order`) so later reads fail only on I/O; every error is
// kInvalidInput and names the file and, where there is one, the dataset. Move-only.
class DumpReader {
 public:
  // Opens and validates `path`.
  static Result<DumpReader> open(const std::string& path);

  DumpReader(DumpReader&& other) noexcept;
  DumpReader& operator=(DumpReader&& other) noexcept;
  DumpReader(const DumpReader&) = delete;
  DumpReader& operator=(const DumpReader&) = delete;
  ~DumpReader();

  // The root attributes.
  const DumpHeader& header() const { return header_; }
  // The file this reader was opened on.
  const std::string& path() const { return path_; }

  // Every dataset, sorted by `order` (ties by path).
  const std::vector<DatasetInfo>& datasets() const { return datasets_; }
  // The dataset at `path`, or nullptr.
  const DatasetInfo* find(const std::string& path) const;
  // True when a group or dataset exists at `path`.
  bool exists(const std::string& path) const;

  // Every group and dataset path, root ("/") included, sorted.
  const std::vector<std::string>& objects() const { return objects_; }

  // Reads a whole dataset into a new tensor and checks its stored digest (a mismatch
  // is kInvalidInput naming the file and dataset).
  Result<Tensor> read(const std::string& path);

  // Reads rows [first_row, first_row + rows) along axis 0 into `out` (resized to fit,
  // its capacity reused), as raw little-endian element bytes in row-major order.
  // A part of a dataset cannot be checked against its digest: a caller that streams a
  // whole dataset through read_chunk() or read_slab() checks it with
  // DatasetDigestCheck (harness/dump/digest.h) in the same pass, as compare_dumps()
  // and verify_dump() do.
  Status read_chunk(const std::string& path, int64_t first_row, int64_t rows,
                    std::vector<std::byte>& out);

  // Reads the hyperslab `start`/`count` (one entry per axis) into `out`, as
  // read_chunk() does. A scalar dataset takes empty vectors.
  Status read_slab(const std::string& path, const std::vector<int64_t>& start,
                   const std::vector<int64_t>& count, std::vector<std::byte>& out);

  // The file offset of a dataset's bytes when they lie in the file exactly as read()
  // returns them (contiguous, unfiltered, allocated, native byte order), so a caller
  // may map them instead of copying; nullopt otherwise (then use read_slab()).
  std::optional<uint64_t> contiguous_offset(const std::string& path);

  // An attribute of a group or dataset ("/" for the root). A string attribute may be
  // fixed- or variable-length; attr_int accepts any integer type, attr_double any
  // integer or float type.
  Result<std::string> attr_string(const std::string& object_path, const std::string& name) const;
  Result<int64_t> attr_int(const std::string& object_path, const std::string& name) const;
  Result<double> attr_double(const std::string& object_path, const std::string& name) const;
  // Every attribute of a group or dataset by name, each bounded by kMaxAttributeBytes.
  Result<std::map<std::string, AttributeValue>> attributes(const std::string& object_path) const;

 private:
  // Opens the object at `object_path` (under the HDF5 lock) and runs `read` on it,
  // naming the file and object in any error.
  template <typename T, typename ReadAttr>
  Result<T> read_attr(const std::string& object_path, ReadAttr read) const;
  DumpReader() = default;
  Result<int64_t> dataset_handle(const std::string& path);
  void close();

  std::string path_;
  int64_t file_ = -1;  // hid_t
  DumpHeader header_;
  std::vector<DatasetInfo> datasets_;
  std::vector<std::string> objects_;
  std::map<std::string, size_t> index_;
  std::string open_dataset_path_;
  int64_t open_dataset_ = -1;  // hid_t of open_dataset_path_, kept for streaming reads
};

}  // namespace splitcheck
