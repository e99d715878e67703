#include <fmt/format.h>

#include "harness/reports/writers.h"

namespace splitcheck {

int first_divergent_layer(const nlohmann::json& c) {
  int layer = -1;
  auto consider = [&](const char* field) {
    if (!c.contains(field) || !c[field].is_object()) return;
    const int l = c[field].value("layer", -1);
    if (l >= 0 && (layer < 0 || l < layer)) layer = l;
  };
  consider("first_divergence");
  consider("dispatch");
  consider("location");  // bisect
  return layer;
}

const nlohmann::json& obj_field(const nlohmann::json& j, const char* key) {
  static const nlohmann::json empty = nlohmann::json::object();
  if (!j.is_object() || !j.contains(key) || !j[key].is_object()) return empty;
  return j[key];
}

std::string str_field(const nlohmann::json& j, const char* key, const std::string& fallback) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return fallback;
  return j[key].get<std::string>();
}

std::string acceptance_line(const nlohmann::json& r) {
  if (!r.contains("acceptance") || !r["acceptance"].is_array() || r["acceptance"].empty())
    return "";
  const nlohmann::json& rows = r["acceptance"];
  const nlohmann::json& pp1 = rows[0];
  std::string hist;
  const nlohmann::json h = pp1.value("accepted_histogram", nlohmann::json::array());
  for (size_t a = 0; a < h.size(); ++a)
    hist += fmt::format("{}a={}: {}", a ? ", " : "", a, h[a].dump());
  size_t equal = 0;
  for (size_t i = 1; i < rows.size(); ++i) equal += rows[i].value("equal_to_pp1", false);
  return fmt::format(
      "PP=1: {} steps, acceptance rate {:.3f}, tokens per forward {:.3f}, accepted lengths [{}]; "
      "{} of {} split points equal to PP=1",
      pp1.value("steps", 0), pp1.value("acceptance_rate", 0.0),
      pp1.value("tokens_per_forward", 0.0), hist, equal, rows.size() - 1);
}

std::string parallelism_text(const nlohmann::json& r) {
  const int n = obj_field(r, "timing").value("threads", 0);
  return r.contains("engine") ? fmt::format("with {} jobs", n) : fmt::format("on {} threads", n);
}

std::string waiver_line(const nlohmann::json& c) {
  std::string out;
  for (const nlohmann::json& w : c.value("waivers", nlohmann::json::array())) {
    if (!w.is_object()) continue;
    const std::string what =
        str_field(w, "split").empty() ? "every split point" : str_field(w, "split");
    out += fmt::format("{}waived ({}, {}): {} ({}, expires {})", out.empty() ? "" : "; ", what,
                       str_field(w, "check").empty() ? "every check" : str_field(w, "check"),
                       str_field(w, "reason"), str_field(w, "link"), str_field(w, "expires"));
  }
  return out;
}

std::vector<std::string> waiver_failures(const nlohmann::json& r) {
  std::vector<std::string> out;
  const nlohmann::json& w = obj_field(r, "waivers");
  for (const nlohmann::json& f : w.value("failures", nlohmann::json::array()))
    if (f.is_string()) out.push_back(f.get<std::string>());
  return out;
}

std::string dataset_figures(const nlohmann::json& c) {
  if (!c.contains("first_divergence")) return "";
  const nlohmann::json& d = c["first_divergence"];
  if (!d.contains("elements")) return "";
  return fmt::format("{} of {} elements differ ({:.4g}%), max ULP {:g}, cosine {:.6g}",
                     d.value("mismatches", int64_t{0}), d.value("elements", int64_t{0}),
                     100.0 * d.value("mismatch_fraction", 0.0), d.value("max_ulp", 0.0),
                     d.value("cosine", 1.0));
}

}  // namespace splitcheck
