// The parts of a report that only a sweep of an external engine has (harness/runner/):
// the engine block that opens it, the checks not judged, and each case's stderr tail.
#include <fmt/format.h>

#include "harness/reports/writers.h"

namespace splitcheck {
namespace {

std::string text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// One argv element as a reader would type it: bare when it is plain, else single-quoted.
std::string shell_word(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_./=:,+@%") == std::string::npos)
    return w;
  std::string out = "'";
  for (char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string display_argv(const nlohmann::json& argv) {
  std::string out;
  if (!argv.is_array()) return out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + shell_word(text(a));
  return out;
}

std::vector<std::pair<std::string, std::string>> engine_rows(const nlohmann::json& r) {
  std::vector<std::pair<std::string, std::string>> rows;
  if (!r.contains("engine") || !r["engine"].is_object()) return rows;
  const nlohmann::json& e = r["engine"];
  const nlohmann::json& p = obj_field(r, "judged_by");
  const nlohmann::json& producer = obj_field(e, "producer");
  std::string engine = str_field(producer, "producer", "(no producer attribute)");
  if (const std::string v = str_field(producer, "version"); !v.empty()) engine += " " + v;
  if (const std::string g = str_field(producer, "git_revision"); !g.empty())
    engine += g == "unknown" ? " (git revision not recorded)" : " (" + g + ")";
  if (const std::string b = str_field(producer, "backend"); !b.empty()) engine += ", backend " + b;
  rows.emplace_back("engine", engine + " (its PP=1 dump's producer)");
  rows.emplace_back("command", display_argv(e.value("command_template", nlohmann::json())));
  rows.emplace_back("command (PP=1)", display_argv(e.value("pp1_command", nlohmann::json())));
  rows.emplace_back("PP=1", str_field(e, "pp1_outcome"));
  rows.emplace_back("cwd", str_field(e, "cwd"));
  std::string env;
  const nlohmann::json vars = e.value("env", nlohmann::json::object());
  for (const auto& [k, v] : vars.items())
    env += (env.empty() ? "" : " ") + k + "=" + shell_word(text(v));
  rows.emplace_back("env (added)", env.empty() ? "(none)" : env);
  rows.emplace_back("timeout", fmt::format("{:g} s per run", e.value("timeout_s", 0.0)));
  const int requested = e.value("jobs_requested", 0);
  rows.emplace_back("jobs", fmt::format("{} requested, {} in effect",
                                        requested > 0 ? std::to_string(requested) : "default",
                                        e.value("jobs", 0)));
  rows.emplace_back("work directory", str_field(e, "work_dir"));
  rows.emplace_back("engine time",
                    fmt::format("{:.2f} s over every run", e.value("engine_seconds", 0.0)));
  const nlohmann::json& ev = obj_field(e, "evidence");
  rows.emplace_back("evidence", ev.contains("waived")
                                    ? "WAIVED by the scenario: " + str_field(ev, "waived")
                                    : "required: " + str_field(ev, "rule"));
  rows.emplace_back("PP=1 content", "sha256 " + str_field(e, "pp1_content_sha256"));
  rows.emplace_back("splitcheck",
                    fmt::format("{} ({})", str_field(p, "version"), str_field(p, "git_revision")));
  return rows;
}

std::vector<std::string> rounding_lines(const nlohmann::json& j) {
  const nlohmann::json& r = obj_field(j, "rounded");
  const int64_t n = r.value("datasets", int64_t{0});
  if (n == 0) return {};
  std::string examples;
  for (const auto& e : r.value("examples", nlohmann::json::array()))
    examples += (examples.empty() ? "" : ", ") + (e.is_string() ? e.get<std::string>() : "");
  if (n > static_cast<int64_t>(r.value("examples", nlohmann::json::array()).size()))
    examples += ", ...";
  if (!j.contains("cases"))
    return {fmt::format("compared after rounding: {} datasets narrowed by their writer ({})", n,
                        examples)};
  return {fmt::format(
      "COMPARED AFTER ROUNDING: {} datasets{} were narrowed by their writer ({}): equal there "
      "is equal after rounding, not the engine's own bits",
      n,
      r.contains("cases") ? fmt::format(" in {} split point{}", r.value("cases", 0),
                                        r.value("cases", 0) == 1 ? "" : "s")
                          : "",
      examples)};
}

nlohmann::json rounding_summary(const nlohmann::json& cases) {
  int64_t n = 0, with = 0;
  nlohmann::json examples = nlohmann::json::array();
  for (const nlohmann::json& c : cases) {
    const nlohmann::json& r = obj_field(c, "rounded");
    const int64_t k = r.value("datasets", int64_t{0});
    if (k == 0) continue;
    n += k;
    ++with;
    for (const auto& e : r.value("examples", nlohmann::json::array()))
      if (examples.size() < 3) examples.push_back(e);
  }
  if (n == 0) return nullptr;
  return {{"cases", with}, {"datasets", n}, {"examples", examples}};
}

std::vector<std::string> not_judged_lines(const nlohmann::json& j) {
  std::vector<std::string> lines;
  for (const auto& n : j.value("not_judged", nlohmann::json::array()))
    lines.push_back(
        fmt::format("{}: not judged ({})", str_field(n, "check"), str_field(n, "reason")));
  return lines;
}

}  // namespace splitcheck
