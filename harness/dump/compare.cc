#include "harness/dump/compare.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <thread>

#include "harness/dump/blocks.h"
#include "harness/dump/digest.h"
#include "harness/dump/dump.h"

namespace splitcheck {
namespace {

// Copying reads (H5Dread) smaller than chunk_bytes keep both buffers in the CPU caches
// while memcmp runs; chunk_bytes stays the upper bound.
constexpr size_t kMaxCopyBlockBytes = size_t{4} << 20;

// Bits of element i of a raw buffer, widened to 32 bits.
inline uint32_t element_bits(DType dtype, const std::byte* p, int64_t i) {
  if (dtype_size(dtype) == 2) {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p + 4 * i, 4);
  return v;
}

// Maps float bits onto integers whose order is the float order (sign-magnitude to
// two's complement), so |ordered(a) - ordered(b)| is the ULP distance; +0 and -0 meet.
inline int64_t ordered(uint32_t bits, uint32_t sign_bit) {
  return (bits & sign_bit) ? -static_cast<int64_t>(bits & (sign_bit - 1))
                           : static_cast<int64_t>(bits);
}

inline bool is_nan(DType dtype, uint32_t bits) {
  if (dtype == DType::kBF16) return (bits & 0x7f80u) == 0x7f80u && (bits & 0x007fu) != 0;
  if (dtype == DType::kF32) return (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu);
  if (dtype == DType::kF16) return (bits & 0x7c00u) == 0x7c00u && (bits & 0x03ffu) != 0;
  return false;
}

inline double value_of(DType dtype, uint32_t bits) {
  switch (dtype) {
    case DType::kBF16:
      return to_f32(bf16{static_cast<uint16_t>(bits)});
    case DType::kF32:
      return std::bit_cast<float>(bits);
    case DType::kI32:
      return static_cast<int32_t>(bits);
    case DType::kF16:
      return f16_to_f32(static_cast<uint16_t>(bits));
  }
  return 0;
}

// Per-dataset statistics, fed block by block in row-major order; one implementation for
// the file and the in-memory paths.
class DiffStats {
 public:
  explicit DiffStats(DType dtype) : dtype_(dtype) {}

  // Adds elements [offset, offset + n) whose bytes are `a` and `b`.
  void add(const std::byte* a, const std::byte* b, int64_t n, int64_t offset) {
    const uint32_t sign_bit = dtype_size(dtype_) == 2 ? 0x8000u : 0x80000000u;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t ua = element_bits(dtype_, a, i), ub = element_bits(dtype_, b, i);
      bool nan_a = is_nan(dtype_, ua), nan_b = is_nan(dtype_, ub);
      double va = value_of(dtype_, ua), vb = value_of(dtype_, ub);
      if (!nan_a && !nan_b && std::isfinite(va) && std::isfinite(vb)) {
        dot_ += va * vb;
        norm_a_ += va * va;
        norm_b_ += vb * vb;
      }
      if (ua == ub) continue;
      if (mismatches_++ == 0) {
        first_index_ = offset + i;
        first_a_ = ua;
        first_b_ = ub;
      }
      if (nan_a || nan_b) {
        nan_mismatch_ = true;
        continue;
      }
      // Different bits with an infinity on either side: infinity against a finite value, or
      // infinities of opposite sign. No ULP or abs distance describes it.
      if (!std::isfinite(va) || !std::isfinite(vb)) {
        non_finite_mismatch_ = true;
        continue;
      }
      double ulp =
          dtype_ == DType::kI32
              ? std::fabs(va - vb)
              : static_cast<double>(std::abs(ordered(ua, sign_bit) - ordered(ub, sign_bit)));
      max_ulp_ = std::max(max_ulp_, ulp);
      double abs = std::fabs(va - vb);
      if (!std::isnan(abs)) max_abs_ = std::max(max_abs_, abs);
    }
  }

  // Writes the statistics into `diff` (whose shape is set).
  void finish(TensorDiff& diff) const {
    diff.mismatches = mismatches_;
    diff.first_index = first_index_;
    diff.first_a_bits = first_a_;
    diff.first_b_bits = first_b_;
    diff.max_ulp = max_ulp_;
    diff.max_abs = max_abs_;
    diff.nan_mismatch = nan_mismatch_;
    diff.non_finite_mismatch = nan_mismatch_ || non_finite_mismatch_;
    if (norm_a_ == 0 && norm_b_ == 0) {
      diff.cosine = 1;
    } else if (norm_a_ == 0 || norm_b_ == 0) {
      diff.cosine = 0;
    } else {
      // Rounding can carry the quotient just past 1 (1.0000000000000002) for parallel
      // vectors: a cosine is never outside [-1, 1].
      diff.cosine = std::clamp(dot_ / (std::sqrt(norm_a_) * std::sqrt(norm_b_)), -1.0, 1.0);
    }
    diff.first_row = diff.first_col = -1;
    if (first_index_ >= 0) {
      int64_t numel = 1;
      for (int64_t d : diff.shape) numel *= d;
      if (diff.shape.empty()) {
        diff.first_row = diff.first_col = 0;
      } else {
        diff.first_row = first_index_ / std::max<int64_t>(numel / diff.shape[0], 1);
        diff.first_col = first_index_ % std::max<int64_t>(diff.shape.back(), 1);
      }
    }
  }

 private:
  DType dtype_;
  int64_t mismatches_ = 0;
  int64_t first_index_ = -1;
  uint32_t first_a_ = 0, first_b_ = 0;
  double max_ulp_ = 0, max_abs_ = 0;
  double dot_ = 0, norm_a_ = 0, norm_b_ = 0;
  bool nan_mismatch_ = false;
  bool non_finite_mismatch_ = false;
};

// Applies the approximate lane's thresholds (CompareOptions) to a finished diff.
void apply_tolerance(const CompareOptions& options, DType dtype, TensorDiff& diff) {
  // A non-finite value the other side does not match bit for bit is never within it.
  if (!options.approximate || diff.mismatches == 0 || diff.non_finite_mismatch) return;
  double max_ulp = dtype == DType::kBF16   ? options.max_ulp_bf16
                   : dtype == DType::kF16 ? options.max_ulp_f16
                   : dtype == DType::kF32 ? options.max_ulp_f32
                                          : 0;
  diff.within_tolerance = diff.max_ulp <= max_ulp && diff.cosine >= options.min_cosine;
}

// Counts a compared dataset that either file's writer narrowed, naming the first few.
void note_rounding(const DatasetInfo& a, const DatasetInfo& b, CompareResult& result) {
  const std::string& source = a.source_dtype.empty() ? b.source_dtype : a.source_dtype;
  if (source.empty()) return;
  if (result.datasets_rounded++ < 3)
    result.rounded_examples.push_back(a.path + ": " + source + " stored as " + dtype_name(a.dtype));
}

bool ignored(const std::string& path, const std::vector<std::string>& prefixes) {
  for (const std::string& p : prefixes)
    if (path.rfind(p, 0) == 0) return true;
  return false;
}

TensorDiff diff_header(const DatasetInfo& info) {
  TensorDiff diff;
  diff.path = info.path;
  diff.dtype = dtype_name(info.dtype);
  diff.shape = info.shape;
  diff.order = info.order;
  return diff;
}

std::string structural_error(const std::string& path, DType da, const Shape& sa, DType db,
                             const Shape& sb) {
  if (da != db)
    return "dataset " + path + ": dtype " + dtype_name(da) + " in A, " + dtype_name(db) + " in B";
  return "dataset " + path + ": shape " + shape_string(sa) + " in A, " + shape_string(sb) + " in B";
}

// A read-only view of a dump file, mapped one window at a time so that resident memory
// stays bounded by the window (at most chunk_bytes), not by the file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd_ >= 0 && ::fstat(fd_, &st) == 0) size_ = static_cast<uint64_t>(st.st_size);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    unmap();
    if (fd_ >= 0) ::close(fd_);
  }

  // The bytes [offset, offset + length) of the file, valid until the next call; nullptr
  // when the range is outside the file or cannot be mapped.
  const std::byte* map(uint64_t offset, size_t length) {
    unmap();
    if (fd_ < 0 || length == 0 || offset > size_ || length > size_ - offset) return nullptr;
    static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    uint64_t start = offset / page * page;
    size_t span = static_cast<size_t>(offset - start) + length;
    // MAP_POPULATE: page-cached data is mapped in one call instead of a fault per page.
    void* p = ::mmap(nullptr, span, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd_,
                     static_cast<off_t>(start));
    if (p == MAP_FAILED) return nullptr;
    base_ = p;
    span_ = span;
    return static_cast<const std::byte*>(p) + (offset - start);
  }

  void unmap() {
    if (base_ != nullptr) ::munmap(base_, span_);
    base_ = nullptr;
    span_ = 0;
  }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  void* base_ = nullptr;
  size_t span_ = 0;
};

// Where one side's bytes come from: mapped straight from the file when the dataset is
// stored contiguously in native order (checked against H5Dread on its first elements),
// otherwise copied by H5Dread into a reused buffer.
class DatasetSource {
 public:
  DatasetSource(DumpReader& reader, MappedFile& file, const DatasetInfo& info,
                std::vector<std::byte>& buffer)
      : reader_(reader), file_(file), info_(info), buffer_(buffer) {
    offset_ = reader.contiguous_offset(info.path);
    if (offset_ && !verify_mapping()) offset_.reset();
  }

  bool mapped() const { return offset_.has_value(); }
  // Where the dataset's bytes start in the file, when mapped().
  std::optional<uint64_t> offset() const { return offset_; }

  // The bytes of `block`, valid until the next call.
  Result<const std::byte*> bytes(const SlabBlock& block) {
    const size_t esize = dtype_size(info_.dtype);
    if (offset_) {
      const std::byte* p = file_.map(*offset_ + static_cast<uint64_t>(block.offset) * esize,
                                     static_cast<size_t>(block.elements) * esize);
      if (p != nullptr) return p;
      offset_.reset();  // fall back to reading
    }
    RETURN_IF_ERROR(reader_.read_slab(info_.path, block.start, block.count, buffer_));
    return static_cast<const std::byte*>(buffer_.data());
  }

 private:
  // Maps the first elements and compares them with what HDF5 reads for them.
  bool verify_mapping() {
    std::vector<int64_t> start(info_.shape.size(), 0), count(info_.shape.size(), 1);
    if (!count.empty()) count.back() = std::min<int64_t>(info_.shape.back(), 16);
    if (!reader_.read_slab(info_.path, start, count, buffer_).is_ok()) return false;
    const std::byte* p = file_.map(*offset_, buffer_.size());
    bool same = p != nullptr && std::memcmp(p, buffer_.data(), buffer_.size()) == 0;
    file_.unmap();
    return same;
  }

  DumpReader& reader_;
  MappedFile& file_;
  const DatasetInfo& info_;
  std::vector<std::byte>& buffer_;
  std::optional<uint64_t> offset_;
};

// Bytes hashed and compared per step inside one block, so that both sides stay in the CPU
// caches between the digest and the memcmp of the same bytes.
constexpr size_t kVerifyStepBytes = size_t{256} << 10;

// True when both files carry a digest for the dataset and the digests are equal.
bool digests_equal(const DatasetInfo& a, const DatasetInfo& b) {
  std::optional<DatasetDigest> da = parse_digest(a.digest), db = parse_digest(b.digest);
  return da && db && *da == *db;
}

// Compares one dataset present in both files with equal dtype and shape, appending a
// diff to `result` when the bytes differ. Every byte of both sides is read once and
// hashed in the same pass; a side whose bytes do not match its stored digest is an
// error (kInvalidInput naming the file and the dataset), whatever the other side holds.
// `verified_differs` set: the parallel pass (verify_mapped) already read, hashed and
// compared the bytes, and says whether they differ; only the statistics are left.
Status compare_dataset(DumpReader& ra, DumpReader& rb, MappedFile& fa, MappedFile& fb,
                       const DatasetInfo& a, const DatasetInfo& b, const CompareOptions& options,
                       std::vector<std::byte>& buf_a, std::vector<std::byte>& buf_b,
                       CompareResult& result, std::optional<bool> verified_differs = {}) {
  if (options.trust_digest && digests_equal(a, b)) {
    ++result.datasets_unverified;
    return Status::ok();
  }
  DatasetDigestCheck check_a(ra.path(), a.path, a.digest), check_b(rb.path(), b.path, b.digest);
  if (a.nbytes == 0) {
    RETURN_IF_ERROR(check_a.finish());
    return check_b.finish();
  }
  if (verified_differs) {
    result.bytes_read += static_cast<int64_t>(2 * a.nbytes);
    if (!*verified_differs) return Status::ok();
  }
  const size_t esize = dtype_size(a.dtype);
  DatasetSource sa(ra, fa, a, buf_a), sb(rb, fb, b, buf_b);
  // Mapped windows cost no copy, so they may be as large as chunk_bytes allows.
  const size_t block_bytes = std::max<size_t>(
      sa.mapped() && sb.mapped() ? options.chunk_bytes
                                 : std::min(options.chunk_bytes, kMaxCopyBlockBytes),
      16);

  // Pass 1: bytes and digests, in one pass over both files.
  bool differs = verified_differs.value_or(false);
  if (!verified_differs)
    RETURN_IF_ERROR(
        for_each_block(a.shape, esize, block_bytes, [&](const SlabBlock& blk) -> Status {
          const size_t n = static_cast<size_t>(blk.elements) * esize;
          ASSIGN_OR_RETURN(const std::byte* pa, sa.bytes(blk));
          ASSIGN_OR_RETURN(const std::byte* pb, sb.bytes(blk));
          result.bytes_read += static_cast<int64_t>(2 * n);
          for (size_t at = 0; at < n; at += kVerifyStepBytes) {
            const size_t step = std::min(kVerifyStepBytes, n - at);
            check_a.update({pa + at, step});
            check_b.update({pb + at, step});
            if (!differs) differs = std::memcmp(pa + at, pb + at, step) != 0;
          }
          return Status::ok();
        }));
  fa.unmap();
  fb.unmap();
  if (!verified_differs) {
    RETURN_IF_ERROR(check_a.finish());
    RETURN_IF_ERROR(check_b.finish());
  }
  if (!differs) return Status::ok();

  // Pass 2: statistics over the whole dataset (the cosine needs every element).
  DiffStats stats(a.dtype);
  RETURN_IF_ERROR(for_each_block(a.shape, esize, block_bytes, [&](const SlabBlock& blk) -> Status {
    ASSIGN_OR_RETURN(const std::byte* pa, sa.bytes(blk));
    ASSIGN_OR_RETURN(const std::byte* pb, sb.bytes(blk));
    result.bytes_read += static_cast<int64_t>(2 * static_cast<size_t>(blk.elements) * esize);
    stats.add(pa, pb, blk.elements, blk.offset);
    return Status::ok();
  }));
  fa.unmap();
  fb.unmap();
  TensorDiff diff = diff_header(a);
  diff.digest_equal = digests_equal(a, b);
  stats.finish(diff);
  apply_tolerance(options, a.dtype, diff);
  result.diffs.push_back(std::move(diff));
  return Status::ok();
}

// A dataset present in both files, equal in dtype and shape, whose bytes lie contiguous
// in both files (DatasetSource::mapped): verify_mapped() reads, hashes and compares it.
struct MappedJob {
  const DatasetInfo* a = nullptr;
  const DatasetInfo* b = nullptr;
  uint64_t offset_a = 0, offset_b = 0;
  bool done = false;  // false: not reached (stopped early) or not mappable: read it in order
  bool differs = false;
  Status status;  // a digest that does not match its bytes
};

// The threads of the parallel pass: options.threads, or one per core, never more than
// there are jobs.
int pass_threads(const CompareOptions& options, size_t jobs) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int wanted = options.threads > 0 ? options.threads : cores;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(wanted), jobs)));
}

// Reads, hashes (both files' stored digests) and compares every job's bytes in one pass,
// datasets spread over `threads` threads that take them in execution order. Each thread
// maps one window per file at a time, of chunk_bytes / threads, so the mapped memory
// stays within two chunk_bytes whatever the file size. With
// options.stop_at_first, jobs after `limit` (the first not needed) are left undone, and
// the limit moves down to just past the first job found differing or corrupt.
void verify_mapped(const std::string& path_a, const std::string& path_b,
                   std::vector<MappedJob>& jobs, size_t limit, const CompareOptions& options) {
  if (jobs.empty() || limit == 0) return;
  const int threads = pass_threads(options, std::min(limit, jobs.size()));
  const size_t window = std::max<size_t>(options.chunk_bytes / static_cast<size_t>(threads), 64);
  std::atomic<size_t> next{0}, stop{limit};
  auto work = [&] {
    MappedFile fa(path_a), fb(path_b);
    for (size_t i = next.fetch_add(1); i < jobs.size() && i < stop.load(); i = next.fetch_add(1)) {
      MappedJob& job = jobs[i];
      DatasetDigestCheck check_a(path_a, job.a->path, job.a->digest);
      DatasetDigestCheck check_b(path_b, job.b->path, job.b->digest);
      bool differs = false, mapped = true;
      for (size_t at = 0; at < job.a->nbytes && mapped; at += window) {
        const size_t n = std::min(window, job.a->nbytes - at);
        const std::byte* pa = fa.map(job.offset_a + at, n);
        const std::byte* pb = fb.map(job.offset_b + at, n);
        mapped = pa != nullptr && pb != nullptr;
        for (size_t k = 0; mapped && k < n; k += kVerifyStepBytes) {
          const size_t step = std::min(kVerifyStepBytes, n - k);
          check_a.update({pa + k, step});
          check_b.update({pb + k, step});
          if (!differs) differs = std::memcmp(pa + k, pb + k, step) != 0;
        }
      }
      fa.unmap();
      fb.unmap();
      if (!mapped) continue;  // read in order instead
      job.status = check_a.finish();
      if (job.status.is_ok()) job.status = check_b.finish();
      job.differs = differs;
      job.done = true;
      if (options.stop_at_first && (differs || !job.status.is_ok())) {
        size_t want = i + 1, have = stop.load();
        while (want < have && !stop.compare_exchange_weak(have, want)) {
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

// The names in a `volatile` root attribute ("created,partition,producer,env").
std::set<std::string> volatile_names(const std::string& list) {
  std::set<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) out.insert(item);
  }
  return out;
}

// Whether attribute `name` of `object` is compared (docs/dump-format.md lists the rule).
bool attribute_compared(const std::string& object, const std::string& name, bool is_dataset,
                        const std::set<std::string>& volatile_root) {
  if (object == "/")
    return name != "format" && name != "format_version" && name != "scenario" &&
           !volatile_root.contains(name);
  if (is_dataset) return name != "dtype" && name != "order" && name != "digest";
  return true;
}

std::string describe_attribute(const std::optional<AttributeValue>& v) {
  if (!v) return "absent";
  std::string text = v->text.size() > 80 ? v->text.substr(0, 77) + "..." : v->text;
  return v->type == "string" ? "\"" + text + "\"" : text + " (" + v->type + ")";
}

// Compares the attributes that carry results (attribute_compared) of every group and
// dataset in either file, appending one AttributeDiff per differing attribute.
Status compare_attributes(const DumpReader& ra, const DumpReader& rb, const CompareOptions& options,
                          CompareResult& result) {
  // The reference (A) alone says what is volatile, and `volatile` itself is always
  // compared: a candidate cannot exempt an attribute by listing it.
  std::set<std::string> volatile_root = volatile_names(ra.header().volatile_attrs);
  volatile_root.erase("volatile");
  std::set<std::string> objects(ra.objects().begin(), ra.objects().end());
  objects.insert(rb.objects().begin(), rb.objects().end());
  for (const std::string& object : objects) {
    if (ignored(object, options.ignore_prefixes)) continue;
    const bool in_a = std::binary_search(ra.objects().begin(), ra.objects().end(), object);
    const bool in_b = std::binary_search(rb.objects().begin(), rb.objects().end(), object);
    std::map<std::string, AttributeValue> attrs_a, attrs_b;
    if (in_a) {
      ASSIGN_OR_RETURN(attrs_a, ra.attributes(object));
    }
    if (in_b) {
      ASSIGN_OR_RETURN(attrs_b, rb.attributes(object));
    }
    const bool is_dataset = ra.find(object) != nullptr || rb.find(object) != nullptr;
    std::set<std::string> names;
    for (const auto& [name, v] : attrs_a) names.insert(name);
    for (const auto& [name, v] : attrs_b) names.insert(name);
    for (const std::string& name : names) {
      if (!attribute_compared(object, name, is_dataset, volatile_root)) continue;
      std::optional<AttributeValue> va, vb;
      if (auto it = attrs_a.find(name); it != attrs_a.end()) va = it->second;
      if (auto it = attrs_b.find(name); it != attrs_b.end()) vb = it->second;
      // An object only in one file is reported as such (only_in_a/b for datasets); its
      // attributes are compared only where the object exists in both.
      if (!in_a || !in_b) {
        if (is_dataset) continue;
      }
      if (va == vb) continue;
      result.attribute_diffs.push_back(
          {object, name, describe_attribute(va), describe_attribute(vb)});
    }
  }
  return Status::ok();
}

}  // namespace

bool CompareResult::equal() const {
  if (!only_in_a.empty() || !only_in_b.empty() || !structural_errors.empty() ||
      !attribute_diffs.empty())
    return false;
  return first_divergence() == nullptr;
}

const TensorDiff* CompareResult::first_divergence() const {
  for (const TensorDiff& d : diffs)
    if (!d.within_tolerance) return &d;
  return nullptr;
}

namespace {

// The /stages/<s> groups a dump records.
int64_t stage_groups(const DumpReader& r) {
  return std::count_if(r.objects().begin(), r.objects().end(), [](const std::string& o) {
    return o.rfind("/stages/", 0) == 0 && o.find('/', 8) == std::string::npos;
  });
}

}  // namespace

Result<CompareResult> compare_dumps(const std::string& a, const std::string& b,
                                    const CompareOptions& options_in) {
  ASSIGN_OR_RETURN(DumpReader ra, DumpReader::open(a));
  ASSIGN_OR_RETURN(DumpReader rb, DumpReader::open(b));
  MappedFile fa(a), fb(b);
  CompareResult result;
  result.digests_trusted = options_in.trust_digest;
  CompareOptions options = options_in;
  if (options.judge_placement) {
    result.stages_a = stage_groups(ra);
    result.stages_b = stage_groups(rb);
    if (result.stages_a > 0 && result.stages_b > 0 &&
        ra.header().partition == rb.header().partition) {
      result.placement = PlacementJudgement::kJudged;
    } else {
      result.placement = result.stages_a > 0 && result.stages_b > 0
                             ? PlacementJudgement::kPartitionsDiffer
                         : result.stages_a + result.stages_b > 0 ? PlacementJudgement::kNotJudged
                                                                 : PlacementJudgement::kNotRecorded;
      result.partition_a = ra.header().partition;
      result.partition_b = rb.header().partition;
      options.ignore_prefixes.push_back("/stages");
      options.ignore_prefixes.push_back("/stage_trace");
    }
  }
  result.header_a = ra.header();
  result.header_b = rb.header();
  std::vector<std::byte> buf_a, buf_b;
  auto stop = [&] {
    return options.stop_at_first &&
           (result.first_divergence() != nullptr || !result.structural_errors.empty() ||
            !result.only_in_a.empty());
  };
  // The datasets stored contiguously in both files are read, hashed and compared first,
  // in parallel (verify_mapped); the walk in execution order below then uses their
  // outcome, and reads the others (chunked or filtered storage) itself.
  std::vector<MappedJob> jobs;
  std::map<const DatasetInfo*, size_t> job_of;
  size_t limit = std::numeric_limits<size_t>::max();
  for (const DatasetInfo& da : ra.datasets()) {
    if (ignored(da.path, options.ignore_prefixes)) continue;
    const DatasetInfo* db = rb.find(da.path);
    if (db == nullptr || da.dtype != db->dtype || da.shape != db->shape) {
      if (options.stop_at_first) limit = std::min(limit, jobs.size());
      continue;
    }
    if (da.nbytes == 0 || (options.trust_digest && digests_equal(da, *db))) continue;
    DatasetSource sa(ra, fa, da, buf_a), sb(rb, fb, *db, buf_b);
    if (!sa.mapped() || !sb.mapped()) continue;
    job_of[&da] = jobs.size();
    MappedJob job;
    job.a = &da;
    job.b = db;
    job.offset_a = *sa.offset();
    job.offset_b = *sb.offset();
    jobs.push_back(job);
  }
  verify_mapped(a, b, jobs, limit, options);

  for (const DatasetInfo& da : ra.datasets()) {
    if (ignored(da.path, options.ignore_prefixes)) continue;
    const DatasetInfo* db = rb.find(da.path);
    if (db == nullptr) {
      if (result.only_in_a.empty()) result.only_in_a_first_order = da.order;
      result.only_in_a.push_back(da.path);
    } else if (da.dtype != db->dtype || da.shape != db->shape) {
      result.structural_errors.push_back(
          structural_error(da.path, da.dtype, da.shape, db->dtype, db->shape));
    } else {
      ++result.datasets_compared;
      result.compared_paths.push_back(da.path);
      note_rounding(da, *db, result);
      std::optional<bool> verified_differs;
      if (auto it = job_of.find(&da); it != job_of.end() && jobs[it->second].done) {
        RETURN_IF_ERROR(jobs[it->second].status);
        verified_differs = jobs[it->second].differs;
      }
      RETURN_IF_ERROR(compare_dataset(ra, rb, fa, fb, da, *db, options, buf_a, buf_b, result,
                                      verified_differs));
    }
    if (stop()) break;
  }
  for (const DatasetInfo& db : rb.datasets()) {
    if (ignored(db.path, options.ignore_prefixes)) continue;
    if (ra.find(db.path) == nullptr) result.only_in_b.push_back(db.path);
  }
  if (!stop()) RETURN_IF_ERROR(compare_attributes(ra, rb, options, result));
  return result;
}

Result<CompareResult> compare_tensors(const std::string& path, const Tensor& a, const Tensor& b,
                                      const CompareOptions& options) {
  CompareResult result;
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) {
    result.structural_errors.push_back(
        structural_error(path, a.dtype(), a.shape(), b.dtype(), b.shape()));
    return result;
  }
  if (a.numel() > 0 && (a.empty() || b.empty()))
    return invalid_input("tensor " + path + ": no data");
  result.datasets_compared = 1;
  const size_t nbytes = a.numel() > 0 ? a.nbytes() : 0;
  // The same bytes (PP=1's tensors that a reused prefix shares) are equal unread.
  if (nbytes == 0 || a.bytes() == b.bytes() || std::memcmp(a.bytes(), b.bytes(), nbytes) == 0)
    return result;
  DiffStats stats(a.dtype());
  stats.add(a.bytes(), b.bytes(), a.numel(), 0);
  TensorDiff diff;
  diff.path = path;
  diff.dtype = dtype_name(a.dtype());
  diff.shape = a.shape();
  stats.finish(diff);
  apply_tolerance(options, a.dtype(), diff);
  result.diffs.push_back(std::move(diff));
  return result;
}

namespace {

// The dataset a StoredTensor names, in `reader` (opened on its file): present, of the
// entry's dtype and shape, and still carrying the digest it was loaded with.
Result<const DatasetInfo*> stored_dataset(const DumpReader& reader, const RecordEntry& e) {
  const StoredTensor& s = *e.stored;
  const DatasetInfo* info = reader.find(s.dataset);
  if (info == nullptr) return invalid_input(s.file + ": dataset " + s.dataset + ": gone since loaded");
  if (info->digest != s.digest || info->dtype != e.tensor.dtype() || info->shape != e.tensor.shape())
    return invalid_input(s.file + ": dataset " + s.dataset +
                         ": changed since loaded (its digest, dtype or shape)");
  return info;
}

// An entry's whole tensor: its own, or its stored dataset read (digest checked).
Result<Tensor> entry_tensor(const RecordEntry& e) {
  if (!e.stored) return e.tensor;
  ASSIGN_OR_RETURN(DumpReader reader, DumpReader::open(e.stored->file));
  ASSIGN_OR_RETURN(const DatasetInfo* info, stored_dataset(reader, e));
  return reader.read(info->path);
}

}  // namespace

Result<CompareResult> compare_entries(const RecordEntry& a, const RecordEntry& b,
                                      const CompareOptions& options) {
  const std::string path = "/" + a.path;
  const Tensor &ta = a.tensor, &tb = b.tensor;
  if ((!a.stored && !b.stored) || ta.dtype() != tb.dtype() || ta.shape() != tb.shape())
    return compare_tensors(path, ta, tb, options);
  if (!a.stored || !b.stored) {
    // One side in memory (not a pair load_dump makes: equal shapes give equal sizes).
    ASSIGN_OR_RETURN(Tensor whole_a, entry_tensor(a));
    ASSIGN_OR_RETURN(Tensor whole_b, entry_tensor(b));
    return compare_tensors(path, whole_a, whole_b, options);
  }
  ASSIGN_OR_RETURN(DumpReader ra, DumpReader::open(a.stored->file));
  ASSIGN_OR_RETURN(DumpReader rb, DumpReader::open(b.stored->file));
  ASSIGN_OR_RETURN(const DatasetInfo* ia, stored_dataset(ra, a));
  ASSIGN_OR_RETURN(const DatasetInfo* ib, stored_dataset(rb, b));
  MappedFile fa(ra.path()), fb(rb.path());
  std::vector<std::byte> buf_a, buf_b;
  CompareOptions streamed = options;
  streamed.trust_digest = false;
  CompareResult result;
  result.datasets_compared = 1;
  RETURN_IF_ERROR(compare_dataset(ra, rb, fa, fb, *ia, *ib, streamed, buf_a, buf_b, result));
  // As compare_tensors() reports it: no file order, no stored digests.
  for (TensorDiff& d : result.diffs) {
    d.path = path;
    d.order = 0;
    d.digest_equal = false;
  }
  result.bytes_read = 0;
  return result;
}

std::string format_bits(DType dtype, uint32_t bits) {
  char buf[16];
  if (dtype_size(dtype) == 2) {
    std::snprintf(buf, sizeof buf, "0x%04x", bits & 0xffffu);
  } else {
    std::snprintf(buf, sizeof buf, "0x%08x", bits);
  }
  return buf;
}

DType diff_dtype(const TensorDiff& diff) {
  DType d = DType::kF32;
  parse_dtype(diff.dtype, d);
  return d;
}

std::string describe_site(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) parts.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  auto is_number = [](const std::string& s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  static const std::map<std::string, std::string> kSingular = {
      {"forward", "forward"}, {"layers", "layer"}, {"taps", "tap"}, {"stages", "stage"}};
  std::string out;
  for (size_t k = 0; k < parts.size(); ++k) {
    if (!out.empty()) out += ' ';
    auto it = kSingular.find(parts[k]);
    if (it != kSingular.end() && k + 1 < parts.size() && is_number(parts[k + 1])) {
      out += it->second + " " + parts[k + 1];
      ++k;
    } else {
      out += parts[k];
    }
  }
  return out;
}

std::string verdict_line(const TensorDiff& diff) {
  std::string site = describe_site(diff.path);
  if (diff.first_index < 0) return site + ": equal";
  const DType dtype = diff_dtype(diff);
  std::string where;
  const Shape& s = diff.shape;
  if (s.size() == 1) {
    where = "token " + std::to_string(diff.first_row);
  } else if (s.size() == 2) {
    where =
        "token " + std::to_string(diff.first_row) + " channel " + std::to_string(diff.first_col);
  } else if (s.size() == 3) {
    int64_t middle = (diff.first_index / std::max<int64_t>(s[2], 1)) % std::max<int64_t>(s[1], 1);
    where = "token " + std::to_string(diff.first_row) + " row " + std::to_string(middle) +
            " channel " + std::to_string(diff.first_col);
  } else if (!s.empty()) {
    Shape index(s.size());
    int64_t rest = diff.first_index;
    for (size_t k = s.size(); k-- > 0;) {
      index[k] = rest % std::max<int64_t>(s[k], 1);
      rest /= std::max<int64_t>(s[k], 1);
    }
    where = "index " + shape_string(index);
  }
  std::string line = site + (where.empty() ? "" : " " + where) + ": " +
                     format_bits(dtype, diff.first_a_bits) +
                     " != " + format_bits(dtype, diff.first_b_bits);
  return line;
}

std::string attribute_line(const AttributeDiff& diff) {
  return "attribute " + diff.name + " of " + diff.object + ": " + diff.a + " in A, " + diff.b +
         " in B";
}

std::string digests_line(const CompareResult& result) {
  if (!result.digests_trusted)
    return "digests verified: every byte of both files read, and every stored digest "
           "checked against it";
  return "digests TRUSTED, not verified (--trust-digests): " +
         std::to_string(result.datasets_unverified) +
         " datasets taken as equal on their stored digests alone, unread";
}

std::string rounding_line(const CompareResult& r) {
  if (r.datasets_rounded == 0) return "";
  std::string line = "compared AFTER ROUNDING: " + std::to_string(r.datasets_rounded) +
                     " datasets narrowed by their writer (";
  for (size_t i = 0; i < r.rounded_examples.size(); ++i)
    line += (i ? ", " : "") + r.rounded_examples[i];
  return line + (r.datasets_rounded > static_cast<int64_t>(r.rounded_examples.size()) ? ", ...)"
                                                                                        : ")") +
         ": equal there is equal after rounding, not the engine's own bits";
}

std::string placement_line(const CompareResult& r) {
  switch (r.placement) {
    case PlacementJudgement::kNotAsked:
      return "";
    case PlacementJudgement::kJudged:
      return "placement judged: " + std::to_string(r.stages_a) + " stages in A, " +
             std::to_string(r.stages_b) + " in B (/stages and /stage_trace compared)";
    case PlacementJudgement::kNotJudged: {
      const bool a_lacks = r.stages_a == 0;
      return std::string("placement not judged: ") + (a_lacks ? "A" : "B") +
             " records no /stages (" + (a_lacks ? "B" : "A") + " records " +
             std::to_string(a_lacks ? r.stages_b : r.stages_a) +
             " stages); /stages and /stage_trace not compared";
    }
    case PlacementJudgement::kNotRecorded:
      return "placement not recorded by either dump (no /stages): not judged";
    case PlacementJudgement::kPartitionsDiffer:
      return "placement not judged: the dumps are of different partitions (A " + r.partition_a +
             ", B " + r.partition_b + "); /stages and /stage_trace not compared";
  }
  return "";
}

std::string verdict(const CompareResult& result) {
  if (!result.structural_errors.empty()) return result.structural_errors.front();
  // The first divergence in A's execution order, whether a dataset differs or B lacks it
  // (a stage that skips a layer is named at that layer, not at the next that differs).
  const TensorDiff* d = result.first_divergence();
  if (!result.only_in_a.empty() && (d == nullptr || result.only_in_a_first_order < d->order))
    return "dataset " + result.only_in_a.front() + " only in A (missing from B)";
  if (d != nullptr) return verdict_line(*d);
  if (!result.only_in_b.empty()) return "dataset " + result.only_in_b.front() + " only in B";
  if (!result.attribute_diffs.empty()) return attribute_line(result.attribute_diffs.front());
  std::string line = "equal (" + std::to_string(result.datasets_compared) + " datasets)";
  if (result.digests_trusted && result.datasets_unverified > 0)
    line += " on " + std::to_string(result.datasets_unverified) +
            " unverified digests (--trust-digests)";
  if (result.datasets_rounded > 0)
    line += ", " + std::to_string(result.datasets_rounded) +
            " of them compared AFTER ROUNDING (narrowed by their writer, e.g. " +
            result.rounded_examples.front() + "): not the engine's own bits";
  return line;
}

}  // namespace splitcheck
