#include "harness/dump/assemble.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <tuple>

#include "harness/dump/dump.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;

const std::set<std::string>& part_root_attrs() {
  static const std::set<std::string> names = {
      "part_format", "part_format_version", "part_run",      "part_stage",
      "part_stages", "part_layer_begin",    "part_layer_end"};
  return names;
}

// A part dataset's attributes the dump does not carry: its position, and what the writer
// writes anew (dtype, order, digest).
const std::set<std::string>& skipped_dataset_attrs() {
  static const std::set<std::string> names = {"part_segment", "part_rank", "part_joined",
                                              "order",        "digest",    "dtype"};
  return names;
}

using Attributes = std::map<std::string, AttributeValue>;

struct PartRecord {
  int64_t segment = 0;
  int64_t rank = 0;
  bool joined = false;
  int64_t order = 0;
  std::string path;
};

struct Part {
  std::string path;
  DumpReader reader;
  std::string run;
  int64_t stage = 0, stages = 0, begin = 0, end = 0;
  std::vector<PartRecord> records;
};

std::string shown(const AttributeValue& v) {
  return v.type == "string" ? "\"" + v.text + "\"" : v.text + " (" + v.type + ")";
}

std::string shown(const Attributes& attrs, const std::string& name) {
  auto it = attrs.find(name);
  return it == attrs.end() ? "absent" : shown(it->second);
}

std::optional<int64_t> as_integer(const AttributeValue& v) {
  if (v.type != "integer") return std::nullopt;
  int64_t x = 0;
  const char* end = v.text.data() + v.text.size();
  auto [p, ec] = std::from_chars(v.text.data(), end, x);
  if (ec != std::errc() || p != end) return std::nullopt;
  return x;
}

// The layer of a /forward/<f>/layers/<l>/... or /forward/<f>/cache/<l> path.
std::optional<int64_t> layer_of(const std::string& path) {
  static const std::regex layer(R"(^/forward/\d+/(?:layers|cache)/(\d+)(?:/.*)?$)");
  std::smatch m;
  if (!std::regex_match(path, m, layer)) return std::nullopt;
  return std::stoll(m[1].str());
}

Result<Part> open_part(const std::string& path) {
  ASSIGN_OR_RETURN(DumpReader r, DumpReader::open(path));
  ASSIGN_OR_RETURN(Attributes root, r.attributes("/"));
  auto format = root.find("part_format");
  if (format == root.end())
    return invalid_input(path +
                         ": not a part file (no root attribute part_format): a whole dump, or "
                         "a file no part writer wrote");
  if (format->second.type != "string" || format->second.text != kPartFormat)
    return invalid_input(path + ": root attribute part_format is " + shown(format->second) +
                         ", not \"" + kPartFormat + "\"");
  auto integer = [&](const std::string& name) -> Result<int64_t> {
    auto it = root.find(name);
    std::optional<int64_t> x;
    if (it != root.end()) x = as_integer(it->second);
    if (!x) return invalid_input(path + ": root attribute " + name + " missing or not an integer");
    return *x;
  };
  ASSIGN_OR_RETURN(int64_t version, integer("part_format_version"));
  if (version != kPartFormatVersion)
    return invalid_input(path + ": part_format_version " + std::to_string(version) +
                         " (this assembler knows " + std::to_string(kPartFormatVersion) + ")");
  auto run = root.find("part_run");
  if (run == root.end() || run->second.type != "string")
    return invalid_input(path + ": root attribute part_run missing or not a string");
  Part part{path, std::move(r), run->second.text, 0, 0, 0, 0, {}};
  ASSIGN_OR_RETURN(part.stage, integer("part_stage"));
  ASSIGN_OR_RETURN(part.stages, integer("part_stages"));
  ASSIGN_OR_RETURN(part.begin, integer("part_layer_begin"));
  ASSIGN_OR_RETURN(part.end, integer("part_layer_end"));
  if (part.stage < 0 || part.stage >= part.stages)
    return invalid_input(path + ": part_stage " + std::to_string(part.stage) + " outside 0.." +
                         std::to_string(part.stages - 1));
  for (const DatasetInfo& d : part.reader.datasets()) {
    ASSIGN_OR_RETURN(Attributes attrs, part.reader.attributes(d.path));
    std::optional<int64_t> pos[3];
    const char* names[3] = {"part_segment", "part_rank", "part_joined"};
    for (int i = 0; i < 3; ++i)
      if (auto it = attrs.find(names[i]); it != attrs.end()) pos[i] = as_integer(it->second);
    if (!pos[0] || !pos[1] || !pos[2])
      return invalid_input(path + ": " + d.path +
                           ": no position (part_segment, part_rank, part_joined integers)");
    if (std::optional<int64_t> layer = layer_of(d.path);
        layer && (*layer < part.begin || *layer >= part.end))
      return invalid_input(path + ": " + d.path + ": layer " + std::to_string(*layer) +
                           " outside stage " + std::to_string(part.stage) + "'s layers " +
                           std::to_string(part.begin) + "-" + std::to_string(part.end));
    part.records.push_back({*pos[0], *pos[1], *pos[2] != 0, d.order, d.path});
  }
  return part;
}

Attributes without(Attributes attrs, const std::set<std::string>& names) {
  for (const std::string& n : names) attrs.erase(n);
  return attrs;
}

// The run, format, stage set and layer ranges of the parts; returns them in stage order.
Result<std::vector<Part*>> check_parts(std::vector<Part>& parts) {
  const Part& first = parts.front();
  for (const Part& p : parts) {
    if (p.run != first.run)
      return invalid_input(p.path + ": part of run \"" + p.run + "\", but " + first.path +
                           " is part of run \"" + first.run + "\"");
    if (p.reader.header().format_version != first.reader.header().format_version)
      return invalid_input(p.path + ": format_version " +
                           std::to_string(p.reader.header().format_version) + ", " + first.path +
                           " has " + std::to_string(first.reader.header().format_version));
    if (p.stages != first.stages)
      return invalid_input(p.path + ": part of " + std::to_string(p.stages) + " stages, " +
                           first.path + " of " + std::to_string(first.stages));
  }
  std::map<int64_t, Part*> by_stage;
  for (Part& p : parts) {
    auto [it, fresh] = by_stage.emplace(p.stage, &p);
    if (!fresh)
      return invalid_input(p.path + ": stage " + std::to_string(p.stage) + " given twice (also " +
                           it->second->path + ")");
  }
  std::string missing;
  for (int64_t s = 0; s < first.stages; ++s)
    if (!by_stage.count(s)) missing += (missing.empty() ? "" : ", ") + std::to_string(s);
  if (!missing.empty()) {
    std::string given;
    for (const Part& p : parts) given += (given.empty() ? "" : ", ") + p.path;
    return invalid_input("missing stage" +
                         std::string(missing.find(',') != std::string::npos ? "s " : " ") +
                         missing + " of " + std::to_string(first.stages) + " (run \"" + first.run +
                         "\"; given: " + given + ")");
  }
  std::vector<Part*> ordered;
  for (auto& [s, p] : by_stage) ordered.push_back(p);
  for (size_t i = 1; i < ordered.size(); ++i) {
    const Part& a = *ordered[i - 1];
    const Part& b = *ordered[i];
    if (b.begin != a.end)
      return invalid_input(b.path + ": stage " + std::to_string(b.stage) + "'s layers " +
                           std::to_string(b.begin) + "-" + std::to_string(b.end) +
                           (b.begin < a.end ? " overlap" : " leave a gap between") + " stage " +
                           std::to_string(a.stage) + "'s " + std::to_string(a.begin) + "-" +
                           std::to_string(a.end) + " (" + a.path + ")");
  }
  ASSIGN_OR_RETURN(Attributes root0, ordered[0]->reader.attributes("/"));
  root0 = without(std::move(root0), part_root_attrs());
  root0.erase("created");
  for (size_t i = 1; i < ordered.size(); ++i) {
    ASSIGN_OR_RETURN(Attributes root, ordered[i]->reader.attributes("/"));
    root = without(std::move(root), part_root_attrs());
    root.erase("created");
    std::set<std::string> names;
    for (const auto& [n, v] : root0) names.insert(n);
    for (const auto& [n, v] : root) names.insert(n);
    for (const std::string& n : names) {
      auto a = root0.find(n), b = root.find(n);
      if (a == root0.end() || b == root.end() || !(a->second == b->second))
        return invalid_input(ordered[i]->path + ": root attribute " + n + " is " + shown(root, n) +
                             ", " + ordered[0]->path + " has " + shown(root0, n) + ": not one run");
    }
  }
  return ordered;
}

// One dataset of the dump and the parts that hold it (several when joined).
struct PlannedDataset {
  std::tuple<int64_t, int64_t, int64_t, int64_t> key;  // segment, rank, stage, order
  std::string path;
  bool joined = false;
  std::vector<Part*> parts;
};

Result<std::vector<PlannedDataset>> plan(const std::vector<Part*>& ordered) {
  std::map<std::string, PlannedDataset> by_path;
  for (Part* p : ordered) {
    for (const PartRecord& r : p->records) {
      auto it = by_path.find(r.path);
      if (it == by_path.end()) {
        by_path.emplace(
            r.path, PlannedDataset{{r.segment, r.rank, p->stage, r.order}, r.path, r.joined, {p}});
        continue;
      }
      PlannedDataset& d = it->second;
      if (!r.joined || !d.joined)
        return invalid_input(p->path + ": " + r.path + " is also in " + d.parts[0]->path +
                             ": stages " + std::to_string(d.parts[0]->stage) + " and " +
                             std::to_string(p->stage) + " overlap");
      if (std::get<0>(d.key) != r.segment || std::get<1>(d.key) != r.rank)
        return invalid_input(
            p->path + ": joined " + r.path + " at position " + std::to_string(r.segment) + "/" +
            std::to_string(r.rank) + ", " + d.parts[0]->path + " puts it at " +
            std::to_string(std::get<0>(d.key)) + "/" + std::to_string(std::get<1>(d.key)));
      d.parts.push_back(p);
    }
  }
  std::vector<PlannedDataset> out;
  for (auto& [path, d] : by_path) out.push_back(std::move(d));
  std::sort(out.begin(), out.end(), [](const PlannedDataset& a, const PlannedDataset& b) {
    return std::tie(a.key, a.path) < std::tie(b.key, b.path);
  });
  return out;
}

// Object path -> attribute name -> (value, the part it came from).
using MergedAttributes =
    std::map<std::string, std::map<std::string, std::pair<AttributeValue, std::string>>>;

Result<MergedAttributes> merge_attributes(const std::vector<Part*>& ordered) {
  static const std::regex stage_group(R"(^/stages/(\d+)$)");
  MergedAttributes merged;
  for (Part* p : ordered) {
    for (const std::string& object : p->reader.objects()) {
      if (object == "/") continue;
      std::smatch m;
      if (std::regex_match(object, m, stage_group) && std::stoll(m[1].str()) != p->stage)
        return invalid_input(p->path + ": " + object + " recorded by stage " +
                             std::to_string(p->stage));
      ASSIGN_OR_RETURN(Attributes attrs, p->reader.attributes(object));
      if (p->reader.find(object) != nullptr)
        attrs = without(std::move(attrs), skipped_dataset_attrs());
      auto& into = merged[object];
      for (auto& [name, value] : attrs) {
        auto it = into.find(name);
        if (it == into.end()) {
          into.emplace(name, std::make_pair(value, p->path));
        } else if (!(it->second.first == value)) {
          return invalid_input(p->path + ": attribute " + name + " of " + object + " is " +
                               shown(value) + ", " + it->second.second + " has " +
                               shown(it->second.first));
        }
      }
    }
  }
  return merged;
}

// One dataset of every contributing part's rows, in stage order.
Result<Tensor> joined_tensor(const PlannedDataset& d) {
  std::vector<Tensor> pieces;
  ASSIGN_OR_RETURN(Attributes first_attrs, d.parts[0]->reader.attributes(d.path));
  first_attrs = without(std::move(first_attrs), skipped_dataset_attrs());
  for (Part* p : d.parts) {
    ASSIGN_OR_RETURN(Tensor t, p->reader.read(d.path));
    if (t.shape().empty())
      return invalid_input(p->path + ": joined " + d.path + " is a scalar: rows cannot be joined");
    if (!pieces.empty()) {
      const Tensor& a = pieces[0];
      if (t.dtype() != a.dtype() || !std::equal(t.shape().begin() + 1, t.shape().end(),
                                                a.shape().begin() + 1, a.shape().end()))
        return invalid_input(p->path + ": joined " + d.path + " is " + dtype_name(t.dtype()) +
                             " with rows unlike " + d.parts[0]->path + "'s: rows cannot be joined");
      ASSIGN_OR_RETURN(Attributes attrs, p->reader.attributes(d.path));
      attrs = without(std::move(attrs), skipped_dataset_attrs());
      if (attrs != first_attrs)
        return invalid_input(p->path + ": the attributes of joined " + d.path + " differ from " +
                             d.parts[0]->path + "'s (kernels declared alike on every stage?)");
    }
    pieces.push_back(std::move(t));
  }
  Shape shape = pieces[0].shape();
  shape[0] = 0;
  for (const Tensor& t : pieces) shape[0] += t.shape()[0];
  Tensor out = Tensor::for_overwrite(pieces[0].dtype(), shape);
  std::byte* at = out.data<std::byte>();
  for (const Tensor& t : pieces) {
    if (t.numel() == 0) continue;
    std::memcpy(at, t.bytes(), t.nbytes());
    at += t.nbytes();
  }
  return out;
}

Status set_typed_attr(DumpWriter& w, const std::string& object, const std::string& name,
                      const AttributeValue& v, const std::string& from) {
  if (v.type == "string") return w.set_attr(object, name, v.text);
  if (std::optional<int64_t> x = as_integer(v)) return w.set_attr(object, name, *x);
  if (v.type == "float" && !v.text.empty() && v.text[0] != '[') {
    char* end = nullptr;
    const double x = std::strtod(v.text.c_str(), &end);
    if (end == v.text.c_str() + v.text.size()) return w.set_attr(object, name, x);
  }
  return invalid_input(from + ": attribute " + name + " of " + object + " is " + v.type + " " +
                       v.text + ": assemble carries single strings, integers and floats");
}

}  // namespace

Result<AssembleSummary> assemble_parts(const std::vector<std::string>& paths,
                                       const std::string& out) {
  if (paths.empty()) return invalid_input("assemble: no part files given");
  std::error_code ec;
  for (const std::string& p : paths)
    if (fs::exists(out, ec) && fs::equivalent(p, out, ec))
      return invalid_input(out + ": the output is one of the parts");
  std::vector<Part> parts;
  parts.reserve(paths.size());
  for (const std::string& p : paths) {
    ASSIGN_OR_RETURN(Part part, open_part(p));
    parts.push_back(std::move(part));
  }
  ASSIGN_OR_RETURN(std::vector<Part*> ordered, check_parts(parts));
  ASSIGN_OR_RETURN(std::vector<PlannedDataset> datasets, plan(ordered));
  ASSIGN_OR_RETURN(MergedAttributes attrs, merge_attributes(ordered));
  Part& base = *ordered[0];
  ASSIGN_OR_RETURN(Attributes root, base.reader.attributes("/"));
  root = without(std::move(root), part_root_attrs());
  root.erase("format");
  root.erase("format_version");

  // Every dataset is read (its digest checked) as it is written; an error abandons the
  // writer, which removes its partial file.
  ASSIGN_OR_RETURN(DumpWriter w, DumpWriter::create(out, base.reader.header()));
  for (const auto& [name, value] : root)  // stage 0's, `created` included, types kept
    RETURN_IF_ERROR(set_typed_attr(w, "/", name, value, base.path));
  for (const PlannedDataset& d : datasets) {
    if (d.parts.size() > 1) {
      ASSIGN_OR_RETURN(Tensor t, joined_tensor(d));
      RETURN_IF_ERROR(w.write(d.path, t));
    } else {
      ASSIGN_OR_RETURN(Tensor t, d.parts[0]->reader.read(d.path));
      RETURN_IF_ERROR(w.write(d.path, t));
    }
  }
  for (const auto& [object, names] : attrs)
    for (const auto& [name, entry] : names)
      RETURN_IF_ERROR(set_typed_attr(w, object, name, entry.first, entry.second));
  RETURN_IF_ERROR(w.finish());
  return AssembleSummary{base.run, static_cast<int64_t>(ordered.size()), datasets.size()};
}

}  // namespace splitcheck
