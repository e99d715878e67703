#include "harness/runner/engine_dump.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>

#include "harness/dump/blocks.h"
#include "harness/dump/digest.h"
#include "harness/dump/dump.h"
#include "harness/dump/verify.h"
#include "kernels/dispatch.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;

// The layer of a dataset path "forward/<f>/layers/<l>/<site>", or -1.
int32_t layer_of_path(const std::string& path) {
  const size_t p = path.find("/layers/");
  if (path.rfind("forward/", 0) != 0 || p == std::string::npos) return -1;
  return std::atoi(path.c_str() + p + 8);
}

// A forward's tensors larger than this stay in their file (StoredTensor): read and checked
// once here, then streamed again by the comparator, so a loaded dump costs memory for its
// small datasets only. Whatever is read as data rather than compared (a dispatch trace, the
// stage trace, /spec, the serving schedule: everything outside /forward/ or a dispatch) is
// always held, however large an engine made it.
constexpr size_t kHeldDatasetBytes = size_t{16} << 20;

// An attribute as the record holds it: an integer as int64, anything else as its text.
AttrValue attr_value(const AttributeValue& v) {
  int64_t n = 0;
  const char* end = v.text.data() + v.text.size();
  if (v.type == "integer" && std::from_chars(v.text.data(), end, n).ptr == end) return n;
  return v.text;
}

// Feeds `text`, length first, to the content digest.
void feed(Sha256& content, const std::string& text) {
  const uint64_t n = text.size();
  content.update(std::as_bytes(std::span(&n, 1)));
  content.update(std::as_bytes(std::span(text.data(), text.size())));
}

// Reads `info` of `r` once, in blocks, checking its digest (and feeding `content`, PP=1's
// content digest, when given), and adds it to d.record: held when small or read as data,
// else as a StoredTensor.
Status load_dataset(DumpReader& r, const DatasetInfo& info, Sha256* content, LoadedDump& d) {
  if (content != nullptr) {
    feed(*content, info.path);
    feed(*content, dtype_name(info.dtype));
    feed(*content, fmt::format("{}", fmt::join(info.shape, ",")));
  }
  const bool dispatch = info.path.ends_with("/dispatch");
  const bool read_as_data = dispatch || !info.path.starts_with("/forward/");
  if (dispatch && (info.dtype != DType::kI32 || info.shape.size() != 2 || info.shape[1] != 4))
    return invalid_input(
        fmt::format("{}: {}: a dispatch trace is int32 [events, 4] (layer, site, kernel, aux)",
                    r.path(), info.path));
  if (info.nbytes <= kHeldDatasetBytes || read_as_data) {
    ASSIGN_OR_RETURN(Tensor t, r.read(info.path));
    if (content != nullptr) content->update(std::span(t.bytes(), t.nbytes()));
    d.record.add(info.path.substr(1), std::move(t));
    return Status::ok();
  }
  DatasetDigestCheck check(r.path(), info.path, info.digest);
  std::vector<std::byte> buffer;
  RETURN_IF_ERROR(for_each_block(
      info.shape, dtype_size(info.dtype), size_t{4} << 20, [&](const SlabBlock& blk) -> Status {
        RETURN_IF_ERROR(r.read_slab(info.path, blk.start, blk.count, buffer));
        check.update(buffer);
        if (content != nullptr) content->update(buffer);
        return Status::ok();
      }));
  RETURN_IF_ERROR(check.finish());
  d.record.add_stored(info.path.substr(1), Tensor::borrow(info.dtype, info.shape, nullptr),
                      StoredTensor{r.path(), info.path, info.digest});
  return Status::ok();
}

}  // namespace

Result<LoadedDump> load_dump(const std::string& path, bool reference) {
  ASSIGN_OR_RETURN(DumpReader r, DumpReader::open(path));
  // The layout here; each dataset's digest as it is read below.
  RETURN_IF_ERROR(verify_dump_layout(r).status());
  LoadedDump d;
  std::error_code ec;
  d.file_size = fs::file_size(path, ec);
  if (reference) {
    ASSIGN_OR_RETURN(d.file_sha256, sha256_file(path));
  }
  Sha256 content;
  ASSIGN_OR_RETURN(auto root, r.attributes("/"));
  for (const auto& [name, value] : root) d.root[name] = value.text;
  std::string forward;  // the /forward/<f> group of the last dataset read
  for (const DatasetInfo& info : r.datasets()) {
    RETURN_IF_ERROR(load_dataset(r, info, reference ? &content : nullptr, d));
    // A serving forward's request and step (its group's attributes), which the judge names
    // a divergence by, as it does for the built-in sweep's record.
    if (info.path.starts_with("/forward/")) {
      const std::string g = info.path.substr(0, info.path.find('/', 9));
      if (g != forward)
        for (const char* name : {"request", "step"})
          if (Result<int64_t> v = r.attr_int(g, name); v.is_ok())
            d.record.set_attr(g.substr(1), name, *v);
      forward = g;
    }
    if (const int32_t l = layer_of_path(info.path.substr(1)); l >= 0) d.layers.insert(l);
    if (info.path.ends_with("/dispatch") && d.kernels.empty())
      if (Result<std::string> k = r.attr_string(info.path, "kernels"); k.is_ok()) d.kernels = *k;
    if (!info.source_dtype.empty())  // narrowed by its writer: the judge says so
      d.record.set_attr(info.path.substr(1), "source_dtype", info.source_dtype);
  }
  if (reference) d.content_sha256 = content.hex();
  for (int s = 0;; ++s) {
    const std::string g = fmt::format("/stages/{}", s);
    if (!r.exists(g)) break;
    StageHoldings h;
    h.index = s;
    ASSIGN_OR_RETURN(int64_t b, r.attr_int(g, "layer_begin"));
    ASSIGN_OR_RETURN(int64_t e, r.attr_int(g, "layer_end"));
    h.range = StageRange{static_cast<int>(b), static_cast<int>(e)};
    if (Result<std::string> emb = r.attr_string(g, "embedding"); emb.is_ok()) h.embedding = *emb;
    if (Result<int64_t> bytes = r.attr_int(g, "parameter_bytes"); bytes.is_ok())
      h.parameter_bytes = static_cast<size_t>(*bytes);
    if (Result<int64_t> n = r.attr_int(g, "held_tensors"); n.is_ok() && *n >= 0)
      h.tensors = static_cast<size_t>(*n);
    if (Result<int64_t> n = r.attr_int(g, "held_storages"); n.is_ok() && *n >= 0)
      h.storages = static_cast<size_t>(*n);
    if (Result<std::string> taps = r.attr_string(g, "owned_taps"); taps.is_ok())
      for (size_t i = 0; i < taps->size();) {
        const size_t comma = std::min(taps->find(',', i), taps->size());
        if (comma > i) h.owned_taps.push_back(std::atoi(taps->c_str() + i));
        i = comma + 1;
      }
    // Every attribute into the record, where stage_evidence_of reads the stage facts.
    ASSIGN_OR_RETURN(auto attrs, r.attributes(g));
    for (const auto& [name, value] : attrs) d.record.set_attr(g.substr(1), name, attr_value(value));
    d.stages.push_back(std::move(h));
  }
  if (const Tensor* hist = d.record.find("spec/accepted_histogram");
      hist != nullptr && !hist->empty() && hist->dtype() == DType::kI32 && hist->numel() > 1) {
    AcceptanceFigures& a = d.acceptance;
    a.speculative = true;
    for (int64_t i = 0; i < hist->numel(); ++i) {
      const int64_t n = hist->data<int32_t>()[i];
      a.accepted_histogram.push_back(n);
      a.steps += n;
      a.accepted += i * n;
    }
    if (a.steps > 0) {
      const double steps = static_cast<double>(a.steps), acc = static_cast<double>(a.accepted);
      a.mean_accepted = acc / steps;
      a.acceptance_rate = acc / (steps * static_cast<double>(hist->numel() - 1));
      a.tokens_per_forward = 1 + acc / steps;
    }
  }
  return d;
}

std::vector<std::string> file_identity_problems(const std::string& dump, const LoadedDump& d,
                                                const std::string& pp1_dump, const LoadedDump& pp1,
                                                int stages) {
  std::vector<std::string> bad;
  struct stat link {};
  if (lstat(dump.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    std::error_code ec;
    bad.push_back(fmt::format("{{out}} is a symbolic link (to {}), not a dump the engine wrote",
                              fs::read_symlink(dump, ec).string()));
  }
  struct stat a {
  }, b{};
  if (!pp1_dump.empty() && stat(dump.c_str(), &a) == 0 && stat(pp1_dump.c_str(), &b) == 0 &&
      a.st_dev == b.st_dev && a.st_ino == b.st_ino)
    bad.push_back("its dump is the PP=1 dump's file itself");
  else if (stages > 1 && d.file_size == pp1.file_size) {
    // Only a file of PP=1's size can be its copy: the digest is taken then.
    const Result<std::string> digest = sha256_file(dump);
    if (digest.is_ok() && digest.value() == pp1.file_sha256)
      bad.push_back("its dump is byte for byte the PP=1 dump");
  }
  return bad;
}

}  // namespace splitcheck
