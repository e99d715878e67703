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
#include "harness/scenario/checks.h"
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

// Dispatch sites whose events belong to the stage that owns their layer: a drafter's
// (draft) and a capture's (tap) are left out, since they may run beside another stage.
bool site_owned_by_layer(int32_t site) {
  return site != static_cast<int32_t>(Site::kTap) && site != static_cast<int32_t>(Site::kDraft);
}

// What the dump's own dispatch trace (`/forward/<f>/dispatch` and `/stage_trace/<f>`, the
// stage of each event) says against the partition: an event of a stage past the last, of a
// layer outside its stage's range, or declared stages that ran nothing of their layers.
// One line per kind, naming the first event.
void stage_trace_contradictions(const LoadedDump& d, const Partition& part,
                                std::vector<std::string>& bad) {
  std::string past, outside, other;
  int64_t outside_count = 0;
  std::set<int32_t> seen, layers_traced;
  for (const RecordEntry& e : d.record.entries()) {
    if (e.path.rfind("stage_trace/", 0) != 0) continue;
    const std::string f = e.path.substr(12);
    const Tensor* table = d.record.find("forward/" + f + "/dispatch");
    const Tensor& st = e.tensor;
    if (table == nullptr || st.dtype() != DType::kI32 || st.shape().size() != 1 ||
        st.dim(0) != table->dim(0)) {
      if (other.empty())
        other = fmt::format("its /{} does not give one stage per event of /forward/{}/dispatch",
                            e.path, f);
      continue;
    }
    const int32_t* stage = st.data<int32_t>();
    const int32_t* row = table->data<int32_t>();
    for (int64_t i = 0; i < st.dim(0); ++i) {
      const int32_t s = stage[i], layer = row[i * 4], site = row[i * 4 + 1];
      if (s < 0 || s >= part.stages()) {
        if (past.empty())
          past = fmt::format("its /{} names stage {} (event {}), of {} stage(s)", e.path, s, i,
                             part.stages());
        continue;
      }
      seen.insert(s);
      if (layer < 0 || !site_owned_by_layer(site)) continue;
      layers_traced.insert(layer);
      const StageRange r = part.stage(s);
      if (layer >= r.begin && layer < r.end) continue;
      if (outside_count++ == 0)
        outside =
            fmt::format("its /{} has stage {} run layer {} (event {}), outside its layers {}-{}",
                        e.path, s, layer, i, r.begin, r.end);
    }
  }
  for (std::string* line : {&other, &past})
    if (!line->empty()) bad.push_back(std::move(*line));
  if (outside_count > 0)
    bad.push_back(outside_count == 1
                      ? outside
                      : fmt::format("{} (and {} more such events)", outside, outside_count - 1));
  std::vector<int> idle;
  for (int s = 0; s < part.stages(); ++s) {
    const StageRange r = part.stage(s);
    const auto l = layers_traced.lower_bound(r.begin);
    if (!seen.count(s) && l != layers_traced.end() && *l < r.end) idle.push_back(s);
  }
  if (!idle.empty())
    bad.push_back(
        fmt::format("its dispatch trace shows events of {} of the {} stages: {} {} ran "
                    "none of {} layers",
                    seen.size(), part.stages(), idle.size() == 1 ? "stage" : "stages",
                    fmt::join(idle, ", "), idle.size() == 1 ? "its" : "their"));
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

PartitionEvidence partition_evidence(const LoadedDump& d, const Partition& part, int layers) {
  PartitionEvidence ev;
  auto& bad = ev.contradictions;
  if (auto it = d.root.find("partition");
      it != d.root.end() && !it->second.empty() && it->second != part.layout())
    bad.push_back(fmt::format("its partition attribute says \"{}\", asked \"{}\"", it->second,
                              part.layout()));
  if (!d.layers.empty() && *d.layers.rbegin() >= layers)
    bad.push_back(fmt::format(
        "it holds tensors of layer {}, past the last of the {} layers the scenario names "
        "(num_hidden_layers)",
        *d.layers.rbegin(), layers));
  if (part.stages() == 1 && !d.layers.empty() && *d.layers.rbegin() < layers &&
      static_cast<int>(d.layers.size()) != layers)
    bad.push_back(fmt::format("its tensors cover {} of the {} layers", d.layers.size(), layers));
  stage_trace_contradictions(d, part, bad);
  if (d.stages.empty()) {
    ev.missing = "the dump carries no /stages (the layer range each stage ran)";
    return ev;
  }
  if (static_cast<int>(d.stages.size()) != part.stages())
    bad.push_back(
        fmt::format("{} stage(s) in its /stages, {} asked", d.stages.size(), part.stages()));
  for (int s = 0; s < std::min<int>(part.stages(), static_cast<int>(d.stages.size())); ++s) {
    const StageRange want = part.stage(s), got = d.stages[s].range;
    if (want.begin != got.begin || want.end != got.end)
      bad.push_back(fmt::format("stage {} ran layers {}-{}, asked {}-{}", s, got.begin, got.end,
                                want.begin, want.end));
  }
  return ev;
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

std::vector<std::string> judged_dataset_checks(const std::vector<std::string>& selected,
                                               const RunRecord& pp1,
                                               std::vector<NotJudged>& not_judged) {
  std::set<std::string> present;
  for (const RecordEntry& e : pp1.entries()) present.insert(dataset_check(e.path));
  std::vector<std::string> judged;
  for (const std::string& c : selected) {
    if (!check_is(c, CheckKind::kDataset)) continue;
    if (present.count(c)) {
      judged.push_back(c);
      continue;
    }
    const std::string what = c == "dispatch"     ? "no dispatch trace"
                             : c == "acceptance" ? "no /spec"
                             : c == "taps"       ? "no taps"
                             : c == "logits"     ? "no logits"
                             : c == "tokens"     ? "no token datasets"
                                                 : "no per-layer tensors";
    not_judged.push_back({c, "the PP=1 dump carries " + what});
  }
  return judged;
}

}  // namespace splitcheck
