#include "harness/judge/waivers.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "harness/judge/result.h"
#include "harness/scenario/checks.h"
#include "harness/scenario/scenario.h"

namespace splitcheck {
namespace {

// A waiver file is a short list; anything larger is refused unread.
constexpr uintmax_t kMaxWaiverFileBytes = uintmax_t{1} << 20;
// A waiver file nests three levels (object, list, entry); deeper text is refused before the
// JSON library parses it.
constexpr int kMaxWaiverDepth = 16;

bool valid_date(const std::string& s) {
  if (s.size() != 10 || s[4] != '-' || s[7] != '-') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9})
    if (s[i] < '0' || s[i] > '9') return false;
  const std::chrono::year_month_day ymd{std::chrono::year{std::stoi(s.substr(0, 4))},
                                        std::chrono::month{unsigned(std::stoi(s.substr(5, 2)))},
                                        std::chrono::day{unsigned(std::stoi(s.substr(8, 2)))}};
  return ymd.ok();
}

bool covers(const Waiver& w, const CaseResult& c, const std::string& check) {
  return (w.split.empty() || w.split == c.key) && (w.check.empty() || w.check == check);
}

}  // namespace

Result<std::vector<Waiver>> load_waivers(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return invalid_input(path + ": cannot open");
  if (size > kMaxWaiverFileBytes)
    return invalid_input(
        fmt::format("{}: {} bytes, more than the 1 MiB a waiver file may have", path, size));
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  if (const std::string deep = json_nesting_error(text, kMaxWaiverDepth); !deep.empty())
    return invalid_input(path + ":" + deep);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return invalid_input(path + ": malformed JSON: " + e.what());
  }
  if (!j.is_object()) return invalid_input(path + ": /: expected an object");
  for (const auto& [key, value] : j.items())
    if (key != "waivers") return invalid_input(path + ": /" + key + ": unknown key");
  if (!j.contains("waivers") || !j["waivers"].is_array())
    return invalid_input(path + ": /waivers: expected an array");
  std::vector<Waiver> out;
  for (size_t i = 0; i < j["waivers"].size(); ++i) {
    const nlohmann::json& e = j["waivers"][i];
    const std::string at = fmt::format("{}: /waivers/{}", path, i);
    if (!e.is_object()) return invalid_input(at + ": expected an object");
    Waiver w;
    w.where = at;
    const std::pair<const char*, std::string*> fields[] = {
        {"scenario", &w.scenario}, {"split", &w.split}, {"check", &w.check},
        {"reason", &w.reason},     {"link", &w.link},   {"expires", &w.expires}};
    for (const auto& [key, value] : e.items()) {
      // (A lambda does not capture a structured binding under clang 14, the sanitizer
      // builds' compiler.)
      const std::string& name = key;
      auto f = std::find_if(std::begin(fields), std::end(fields),
                            [&](const auto& p) { return name == p.first; });
      if (f == std::end(fields)) return invalid_input(at + "/" + key + ": unknown key");
      if (!value.is_string() || value.get<std::string>().empty())
        return invalid_input(at + "/" + key + ": expected a non-empty string");
      *f->second = value.get<std::string>();
    }
    for (const char* required : {"scenario", "reason", "link", "expires"})
      if (!e.contains(required))
        return invalid_input(at + "/" + required +
                             ": missing (a waiver needs scenario, reason, "
                             "link and expires)");
    if (w.split.empty() && w.check.empty())
      return invalid_input(at +
                           ": names neither a split nor a check: it would waive the whole "
                           "scenario");
    if (!w.check.empty() && find_check(w.check) == nullptr)
      return invalid_input(at + "/check: unknown check \"" + w.check + "\"");
    if (!valid_date(w.expires))
      return invalid_input(at + "/expires: \"" + w.expires + "\" is not a date YYYY-MM-DD");
    out.push_back(w);
  }
  return out;
}

std::string utc_today() {
  const auto days = std::chrono::floor<std::chrono::days>(std::chrono::system_clock::now());
  const std::chrono::year_month_day ymd{days};
  return fmt::format("{:04}-{:02}-{:02}", int(ymd.year()), unsigned(ymd.month()),
                     unsigned(ymd.day()));
}

void apply_waivers(const std::vector<Waiver>& waivers, const std::string& today,
                   SweepResult& result) {
  std::vector<const Waiver*> live;
  for (const Waiver& w : waivers) {
    if (w.scenario != result.scenario_name) continue;
    // ISO dates compare as text; a waiver holds through its expiry day.
    if (w.expires < today) {
      result.waiver_failures.push_back(fmt::format(
          "{}: waiver of {} {} expired on {} ({}; {}): renew or remove it", w.where, w.scenario,
          w.split.empty() ? "check " + w.check
                          : w.split + (w.check.empty() ? "" : " check " + w.check),
          w.expires, w.reason, w.link));
      continue;
    }
    live.push_back(&w);
  }
  for (CaseResult& c : result.cases) {
    if (c.verdict != Verdict::kDiverged || c.failed_checks.empty()) continue;
    std::vector<const Waiver*> used;
    bool all_covered = true;
    for (const std::string& check : c.failed_checks) {
      auto w = std::find_if(live.begin(), live.end(),
                            [&](const Waiver* x) { return covers(*x, c, check); });
      if (w == live.end()) {
        all_covered = false;
        break;
      }
      if (std::find(used.begin(), used.end(), *w) == used.end()) used.push_back(*w);
    }
    if (!all_covered) continue;
    c.verdict = Verdict::kWaived;
    for (const Waiver* w : used) c.waivers.push_back(*w);
  }
}

}  // namespace splitcheck
