#include "harness/gates/golden.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "harness/dump/compare.h"
#include "harness/dump/digest.h"
#include "harness/engine/run.h"
#include "harness/gates/environment.h"
#include "reference/partial_files.h"

namespace splitcheck {
namespace fs = std::filesystem;

namespace {

Result<nlohmann::json> read_manifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json{{"goldens", nlohmann::json::array()}};
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (!j.contains("goldens") || !j["goldens"].is_array())
      return invalid_input(path + ": /goldens: expected array");
    return j;
  } catch (const nlohmann::json::exception& e) {
    return invalid_input(path + ": malformed JSON: " + e.what());
  }
}

Status write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".partial";
  const PartialFile removed_on_interrupt(tmp);
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) return internal_error(path + ": cannot write");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return internal_error(path + ": cannot rename: " + ec.message());
  return Status::ok();
}

Result<std::string> string_field(const nlohmann::json& entry, const char* key, size_t index) {
  if (!entry.contains(key) || !entry[key].is_string())
    return invalid_input(fmt::format("MANIFEST.json: /goldens/{}/{}: expected string", index, key));
  return entry[key].get<std::string>();
}

// What a golden keeps of a PP=1 record: everything of the prefill forwards, and of the
// decode, verify and replay forwards everything but the per-layer tensors, bank and
// output read. Their tokens, taps, logits and dispatch still pin every later forward,
// and the golden stays a few MB (the sweep itself compares every tensor in memory).
RunRecord golden_record(const RunRecord& full) {
  RunRecord g;
  std::map<std::string, std::string> kinds;
  for (const auto& [object, attrs] : full.attrs()) {
    auto it = attrs.find("kind");
    if (it != attrs.end() && std::holds_alternative<std::string>(it->second))
      kinds[object + "/"] = std::get<std::string>(it->second);
  }
  for (const RecordEntry& e : full.entries()) {
    const size_t slash = e.path.find('/', 8);
    const std::string forward = e.path.rfind("forward/", 0) == 0 && slash != std::string::npos
                                    ? e.path.substr(0, slash + 1)
                                    : "";
    const bool per_layer = e.path.find("/layers/") != std::string::npos ||
                           e.path.ends_with("/bank") || e.path.ends_with("/output");
    if (!forward.empty() && per_layer && kinds[forward] != "prefill") continue;
    g.add(e.path, e.tensor);
  }
  for (const auto& [object, attrs] : full.attrs())
    for (const auto& [name, value] : attrs) g.set_attr(object, name, value);
  return g;
}

// The scenario a golden runs: on the entry's backend (empty: its own), at summary level
// where the entry says so.
void apply_golden_settings(Scenario& s, const std::string& backend, const std::string& level) {
  if (!backend.empty()) s.backend = backend;
  if (level == "summary") s.dump_level = DumpLevel::kSummary;
}

}  // namespace

Result<std::vector<GoldenCheck>> verify_goldens(const std::string& source_dir,
                                                const std::string& golden_dir) {
  const std::string manifest_path = golden_dir + "/MANIFEST.json";
  if (!fs::exists(manifest_path)) return invalid_input(manifest_path + ": no such file");
  ASSIGN_OR_RETURN(nlohmann::json manifest, read_manifest(manifest_path));
  std::vector<GoldenCheck> checks;
  const auto& goldens = manifest["goldens"];
  // Verifying nothing proves nothing: a manifest without a golden is refused.
  if (goldens.empty())
    return invalid_input(manifest_path +
                         ": /goldens: the manifest lists no golden: nothing to verify");
  for (size_t i = 0; i < goldens.size(); ++i) {
    const nlohmann::json& g = goldens[i];
    ASSIGN_OR_RETURN(std::string file, string_field(g, "file", i));
    ASSIGN_OR_RETURN(std::string scenario_rel, string_field(g, "scenario", i));
    ASSIGN_OR_RETURN(std::string want_sha, string_field(g, "sha256", i));
    ASSIGN_OR_RETURN(std::string want_scenario_sha, string_field(g, "scenario_sha256", i));
    GoldenCheck check{file, false, "", {}, {}, false};
    const std::string backend = g.value("backend", "");
    const nlohmann::json here = environment_fingerprint(backend.empty() ? "cpu" : backend);
    const FingerprintDiff env =
        diff_fingerprints(g.contains("env") ? g["env"] : nlohmann::json(), here);
    check.environment_differences = env.differences;
    check.unrecorded_fields = env.unrecorded;
    const std::string golden_path = golden_dir + "/" + file;
    if (backend_device(backend) == Device::kCuda && here.value("device", "") != "cuda") {
      // A GPU golden where no GPU runs: nothing can be recomputed, so nothing is judged.
      check.not_judged = true;
      check.message = fmt::format(
          "not judged: a golden of the {} backend ({}), and {}: verify it on its GPU "
          "(scripts/gpu-check.sh)",
          backend, g.contains("env") ? g["env"].value("gpu", "no GPU recorded") : "no env",
          here.value("device", ""));
      checks.push_back(check);
      continue;
    }
    ASSIGN_OR_RETURN(Scenario s, load_scenario(source_dir + "/" + scenario_rel));
    apply_golden_settings(s, backend, g.value("level", ""));
    ASSIGN_OR_RETURN(std::string scenario_sha, scenario_identity_sha256(s));
    if (scenario_sha != want_scenario_sha) {
      check.message = "scenario " + scenario_rel + " changed since the golden was made " +
                      "(run golden update --reason ...)";
      checks.push_back(check);
      continue;
    }
    ASSIGN_OR_RETURN(ReferenceRun run, run_reference(s));
    const fs::path tmp =
        fs::temp_directory_path() / fmt::format("splitcheck-golden-{}-{}.h5", ::getpid(), i);
    ASSIGN_OR_RETURN(DumpHeader header,
                     make_dump_header(s, fmt::format("0-{}", s.model.num_hidden_layers)));
    RETURN_IF_ERROR(write_record(tmp.string(), golden_record(run.record), header));
    CompareOptions opts;
    opts.trust_digest = false;  // read every byte and check the golden's stored digests
    Result<CompareResult> cmp = compare_dumps(golden_path, tmp.string(), opts);
    fs::remove(tmp);
    // A golden whose bytes do not match its own digests is a corrupt file (exit 2), not a
    // divergence of the code under test.
    if (!cmp.is_ok() && cmp.status().code() == StatusCode::kInvalidInput) return cmp.status();
    if (!cmp.is_ok()) {
      check.message = cmp.status().message();
    } else if (!cmp->equal()) {
      check.message = verdict(*cmp);
    } else {
      ASSIGN_OR_RETURN(std::string sha, sha256_file(golden_path));
      if (sha != want_sha) {
        check.message = golden_path + ": data equal but file sha256 differs from MANIFEST.json";
      } else {
        check.passed = true;
        check.message = fmt::format("{} datasets bit-identical", cmp->datasets_compared);
      }
    }
    if (!check.passed && !env.same()) {
      // Another environment may compute other bits: say what differs, judge nothing.
      check.not_judged = true;
      check.message = fmt::format(
          "not judged: made in another environment ({}); its data differ here ({}): verify in "
          "the golden's environment, or remake it here with golden update --reason",
          fmt::join(env.differences, "; "), check.message);
    }
    checks.push_back(check);
  }
  return checks;
}

Status update_goldens(const std::string& source_dir, const std::string& golden_dir,
                      const std::vector<std::string>& scenario_paths, const std::string& reason,
                      const std::string& backend) {
  if (reason.empty()) return invalid_input("golden update needs --reason");
  const std::string manifest_path = golden_dir + "/MANIFEST.json";
  ASSIGN_OR_RETURN(nlohmann::json manifest, read_manifest(manifest_path));
  // (scenario path, backend): every manifest entry keeps its own backend when none is named.
  std::vector<std::pair<std::string, std::string>> paths;
  for (const std::string& p : scenario_paths) paths.emplace_back(p, backend);
  if (paths.empty()) {
    for (const auto& g : manifest["goldens"])
      paths.emplace_back(g.value("scenario", ""),
                         backend.empty() ? g.value("backend", "") : backend);
  }
  fs::create_directories(golden_dir);
  for (const auto& [given, run_backend] : paths) {
    // Scenario paths are stored relative to the source tree.
    fs::path abs = fs::absolute(fs::path(given).is_absolute() ? fs::path(given)
                                                              : fs::path(source_dir) / given);
    const std::string rel = fs::relative(abs, source_dir).generic_string();
    ASSIGN_OR_RETURN(Scenario s, load_scenario(abs.string()));
    apply_golden_settings(s, run_backend,
                          s.model.hidden_size >= kGoldenSummaryHiddenSize ? "summary" : "");
    if (!run_backend.empty())
      RETURN_IF_ERROR(check_capabilities(s, abs.string() + " (golden update)"));
    ASSIGN_OR_RETURN(ReferenceRun run, run_reference(s));
    ASSIGN_OR_RETURN(DumpHeader header,
                     make_dump_header(s, fmt::format("0-{}", s.model.num_hidden_layers)));
    header.created = "volatile";  // goldens carry no time, so their sha256 is reproducible
    const std::string file = s.name + ".h5";
    RETURN_IF_ERROR(write_record(golden_dir + "/" + file, golden_record(run.record), header,
                                 /*compress=*/true));
    ASSIGN_OR_RETURN(std::string sha, sha256_file(golden_dir + "/" + file));
    nlohmann::json entry{{"file", file},
                         {"scenario", rel},
                         {"sha256", sha},
                         {"scenario_sha256", header.scenario_sha256},
                         {"model_sha256", header.model_sha256},
                         {"producer", nlohmann::json::parse(header.producer_json)},
                         {"env", environment_fingerprint(s.backend)},
                         {"level", header.level},
                         {"reason", reason}};
    // Recorded only off the default, so CPU goldens' entries keep their form.
    if (s.backend != "cpu") entry["backend"] = s.backend;
    auto& goldens = manifest["goldens"];
    bool replaced = false;
    for (auto& g : goldens) {
      if (g.value("file", "") == file) {
        g = entry;
        replaced = true;
      }
    }
    if (!replaced) goldens.push_back(entry);
  }
  return write_text_atomically(manifest_path, manifest.dump(2) + "\n");
}

}  // namespace splitcheck
