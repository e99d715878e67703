// report.html: one self-contained page rendered from the report model. Inline CSS and
// SVG only: no script, no fonts, no network access. Every string is escaped.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "harness/judge/outcome.h"
#include "harness/reports/report.h"
#include "harness/reports/writers.h"

namespace splitcheck {
namespace {

std::string esc(const std::string& s) { return xml_escape(s); }

// A scalar model value as text (strings unquoted).
std::string text_of(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump();
}

constexpr const char* kStyle = R"css(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d2327;background:#fff}
h1{font-size:22px;margin:0 0 6px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.verdict{display:inline-block;padding:4px 12px;border-radius:4px;color:#fff;font-weight:700;letter-spacing:.04em}
.verdict.conformant{background:#1a7f37}.verdict.divergent{background:#cf222e}.verdict.no-data{background:#9a6700}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
pre{background:#f6f8fa;border:1px solid #d0d7de;padding:8px;white-space:pre-wrap;word-break:break-all}
.v-pass{color:#1a7f37;font-weight:600}.v-diverged{color:#cf222e;font-weight:600}
.v-config-rejected{color:#9a6700;font-weight:600}.v-error{color:#8250df;font-weight:600}.v-skipped{color:#6e7781}
.prov td:first-child{color:#57606a}.small{font-size:12px;color:#57606a}
tr.differs td{background:#fff1c2}tr.differs td:first-child{font-weight:700;color:#9a6700}
.legend span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:12px;height:12px;vertical-align:middle;margin-right:4px;border:1px solid #999}
)css";

// Cell colours of the map.
constexpr const char* kIdentical = "#9fd8a8";
constexpr const char* kFirst = "#cf222e";
constexpr const char* kPropagated = "#f4a582";
constexpr const char* kRejected = "#d4c26a";
constexpr const char* kError = "#b39ddb";
constexpr const char* kSkipped = "#e1e4e8";
constexpr const char* kWaived = "#8fb8de";
constexpr const char* kUnproven = "#f0b37e";

std::string map_svg(const nlohmann::json& r) {
  const nlohmann::json& cases = r["cases"];
  int layers = obj_field(r, "scenario").value("layers", 0);
  for (const nlohmann::json& c : cases) {
    for (const auto& cut : c.value("cuts", nlohmann::json::array()))
      layers = std::max(layers, cut.get<int>() + 1);
    layers = std::max(layers, first_divergent_layer(c) + 1);
  }
  if (layers <= 0 || cases.empty()) return "<p class=\"small\">No split points to map.</p>\n";
  constexpr int kCellW = 22, kCellH = 16, kLabelW = 130, kTop = 22;
  const int width = kLabelW + layers * kCellW + 10;
  const int height = kTop + static_cast<int>(cases.size()) * kCellH + 8;
  std::string out = fmt::format(
      "<svg id=\"split-map\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" data-rows=\"{}\" data-layers=\"{}\" role=\"img\" "
      "aria-label=\"split point by layer map\" font-family=\"ui-monospace,monospace\" "
      "font-size=\"10\">\n",
      width, height, width, height, cases.size(), layers);
  for (int l = 0; l < layers; ++l)
    out +=
        fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#57606a\">{}</text>\n",
                    kLabelW + l * kCellW + kCellW / 2, kTop - 8, l);
  for (size_t row = 0; row < cases.size(); ++row) {
    const nlohmann::json& c = cases[row];
    const std::string verdict = str_field(c, "verdict");
    const int first = verdict == "diverged" ? first_divergent_layer(c) : -1;
    const int y = kTop + static_cast<int>(row) * kCellH;
    out += fmt::format(
        "<g class=\"map-row\" data-key=\"{}\" data-verdict=\"{}\" data-first-layer=\"{}\">\n",
        esc(str_field(c, "key")), esc(verdict), first);
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", kLabelW - 6,
                       y + kCellH - 4, esc(str_field(c, "key")));
    for (int l = 0; l < layers; ++l) {
      const char* colour = kIdentical;
      const char* state = "identical";
      if (verdict == "config-rejected") {
        colour = kRejected, state = "config-rejected";
      } else if (verdict == "error") {
        colour = kError, state = "error";
      } else if (verdict == "skipped") {
        colour = kSkipped, state = "skipped";
      } else if (verdict == "waived") {
        colour = kWaived, state = "waived";
      } else if (verdict == "unproven") {
        colour = kUnproven, state = "unproven";
      } else if (verdict == "interrupted") {
        colour = kSkipped, state = "interrupted";
      } else if (verdict == "diverged" && first >= 0 && l == first) {
        colour = kFirst, state = "first divergence";
      } else if (verdict == "diverged" && (first < 0 || l > first)) {
        colour = kPropagated, state = "propagated";
      }
      out += fmt::format(
          "<rect class=\"cell\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" "
          "stroke=\"#fff\" "
          "data-state=\"{}\"><title>{} layer {}: {}</title></rect>\n",
          kLabelW + l * kCellW, y, kCellW, kCellH, colour, state, esc(str_field(c, "key")), l,
          state);
    }
    for (const auto& cut : c.value("cuts", nlohmann::json::array())) {
      const int x = kLabelW + cut.get<int>() * kCellW;
      out += fmt::format(
          "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#1d2327\" stroke-width=\"2\"/>\n",
          x, y, x, y + kCellH);
    }
    out += "</g>\n";
  }
  out += "</svg>\n";
  out += "<p class=\"legend small\">";
  for (const auto& [colour, label] :
       {std::pair{kIdentical, "identical"}, std::pair{kFirst, "first divergence"},
        std::pair{kPropagated, "propagated after it"}, std::pair{kRejected, "config-rejected"},
        std::pair{kError, "error"}})
    out +=
        fmt::format("<span><i class=\"sw\" style=\"background:{}\"></i>{}</span>", colour, label);
  out += "<span>black bar: stage boundary (cut)</span></p>\n";
  return out;
}

std::string first_divergence_text(const nlohmann::json& c) {
  if (!c.contains("first_divergence")) return "";
  const nlohmann::json& d = c["first_divergence"];
  return fmt::format("forward {} layer {} {} token {} channel {}: {} != {} (max ulp {}, cosine {})",
                     text_of(d.value("forward", nlohmann::json())),
                     text_of(d.value("layer", nlohmann::json())), str_field(d, "site"),
                     text_of(d.value("token", nlohmann::json())),
                     text_of(d.value("channel", nlohmann::json())), str_field(d, "expected_bits"),
                     str_field(d, "actual_bits"), text_of(d.value("max_ulp", nlohmann::json())),
                     text_of(d.value("cosine", nlohmann::json())));
}

// A case's message, and for a sweep's case what its engine computed against PP=1.
std::string message_cell(const nlohmann::json& r, const nlohmann::json& c) {
  std::string out;
  if (const std::string cause = str_field(c, "cause"); !cause.empty())
    out = fmt::format("<strong class=\"cause\" data-cause=\"{}\">{}</strong><br>", esc(cause),
                      esc(cause));
  out += esc(str_field(c, "message"));
  if (c.contains("computed") && r.contains("computed"))
    out += fmt::format("<br><small class=\"computed\">computed: {}</small>",
                       esc(computed_text(c["computed"], obj_field(r["computed"], "pp1"))));
  return out;
}

// An external engine's case: its stderr tail and the checks not judged, below its message.
std::string case_extra(const nlohmann::json& c) {
  std::string out;
  for (const std::string& line : not_judged_lines(c))
    out += "<br><span class=\"not-judged\">" + esc(line) + "</span>";
  for (const std::string& line : rounding_lines(c))
    out += "<br><span class=\"rounded\">" + esc(line) + "</span>";
  if (c.contains("stderr_tail"))
    out += "<details class=\"stderr\"><summary>engine stderr (tail)</summary><pre>" +
           esc(str_field(c, "stderr_tail")) + "</pre></details>";
  return out;
}

// The last cells of a case row: "differing / compared" datasets for a sweep; for compare,
// the mismatching elements (count and fraction of the dataset), max ULP and cosine.
std::string figure_cells(const nlohmann::json& c, bool compare) {
  if (!compare)
    return fmt::format("<td class=\"num\">{} / {}</td>", c.value("datasets_differing", 0),
                       c.value("datasets_compared", 0));
  const nlohmann::json& d = obj_field(c, "first_divergence");
  if (!d.contains("elements")) return "<td></td><td></td><td></td>";
  return fmt::format(
      "<td class=\"num mismatches\" data-mismatches=\"{}\" data-fraction=\"{}\">{} of {} "
      "({:.4g}%)</td><td class=\"num\">{:g}</td><td class=\"num\">{:.6g}</td>",
      d.value("mismatches", int64_t{0}), d.value("mismatch_fraction", 0.0),
      d.value("mismatches", int64_t{0}), d.value("elements", int64_t{0}),
      100.0 * d.value("mismatch_fraction", 0.0), d.value("max_ulp", 0.0), d.value("cosine", 1.0));
}

// compare: each input's producer, backend, device and environment side by side with the
// comparator's own build; rows where the inputs differ are highlighted.
std::string inputs_provenance_table(const nlohmann::json& r) {
  if (!r.contains("inputs_provenance")) return "";
  std::string out =
      "<table class=\"prov\" id=\"inputs-provenance\"><thead><tr><th>field</th><th>golden "
      "(a)</th><th>candidate (b)</th><th>comparator (this build)</th></tr></thead><tbody>\n";
  for (const nlohmann::json& row : r["inputs_provenance"]) {
    const bool differs = row.value("differs", false);
    out += fmt::format(
        "<tr class=\"{}\" data-field=\"{}\" data-differs=\"{}\"><td>{}</td><td><code>{}</code></td>"
        "<td><code>{}</code></td><td><code>{}</code></td></tr>\n",
        differs ? "differs" : "same", esc(str_field(row, "field")), differs,
        esc(str_field(row, "field")), esc(str_field(row, "a")), esc(str_field(row, "b")),
        esc(str_field(row, "comparator")));
  }
  return out + "</tbody></table>\n";
}

// compare: the largest mismatch fraction of each layer (over its forwards and sites) as
// a bar chart, so where a divergence starts and how it grows reads at a glance. The
// scale runs to the largest fraction seen; a layer with any mismatch gets at least a
// sliver, so one wrong element out of millions still shows.
std::string layer_chart_svg(const nlohmann::json& r) {
  const nlohmann::json& layers = r.value("layers", nlohmann::json::array());
  if (!layers.is_array() || layers.empty())
    return "<p class=\"small\">No per-layer datasets to chart.</p>\n";
  double top = 0;
  for (const nlohmann::json& l : layers) top = std::max(top, l.value("mismatch_fraction", 0.0));
  constexpr int kBarW = 18, kPlotH = 120, kLeft = 58, kTop = 14, kBottom = 34;
  const int n = static_cast<int>(layers.size());
  const int width = kLeft + n * kBarW + 12, height = kTop + kPlotH + kBottom;
  std::string out = fmt::format(
      "<svg id=\"layer-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" data-layers=\"{}\" role=\"img\" aria-label=\"mismatch fraction per "
      "layer\" font-family=\"ui-monospace,monospace\" font-size=\"10\">\n",
      width, height, width, height, n);
  out += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#57606a\"/>"
      "<line x1=\"{0}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\" stroke=\"#57606a\"/>\n"
      "<text x=\"{4}\" y=\"{5}\" text-anchor=\"end\" fill=\"#57606a\">{6}</text>"
      "<text x=\"{4}\" y=\"{2}\" text-anchor=\"end\" fill=\"#57606a\">0</text>\n"
      "<text x=\"{7}\" y=\"{8}\" text-anchor=\"middle\" fill=\"#57606a\">layer</text>\n",
      kLeft, kTop, kTop + kPlotH, width - 6, kLeft - 4, kTop + 8,
      top > 0 ? fmt::format("{:.3g}%", 100 * top) : "0%", kLeft + n * kBarW / 2, height - 4);
  for (int i = 0; i < n; ++i) {
    const nlohmann::json& l = layers[static_cast<size_t>(i)];
    const double f = l.value("mismatch_fraction", 0.0);
    const int h = f <= 0 ? 0 : std::max(2, static_cast<int>(kPlotH * f / top + 0.5));
    const int x = kLeft + i * kBarW;
    out += fmt::format(
        "<g class=\"layer-bar\" data-layer=\"{}\" data-fraction=\"{}\"><rect x=\"{}\" y=\"{}\" "
        "width=\"{}\" height=\"{}\" fill=\"{}\"><title>layer {}: {:.4g}% of elements differ "
        "(largest over forwards and sites), max ULP {:g}, min cosine {:.6g}, {} of {} datasets "
        "differ</title></rect><text x=\"{}\" y=\"{}\" text-anchor=\"middle\" "
        "fill=\"#57606a\">{}</text></g>\n",
        l.value("layer", -1), f, x + 2, kTop + kPlotH - h, kBarW - 4, h,
        f > 0 ? kFirst : kIdentical, l.value("layer", -1), 100 * f, l.value("max_ulp", 0.0),
        l.value("min_cosine", 1.0), l.value("differing", 0), l.value("datasets", 0), x + kBarW / 2,
        kTop + kPlotH + 12, l.value("layer", -1));
    if (f <= 0)  // an equal layer: a short green tick on the axis
      out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"2\" fill=\"{}\"/>\n", x + 2,
                         kTop + kPlotH - 2, kBarW - 4, kIdentical);
  }
  return out + "</svg>\n";
}

std::string cases_table(const nlohmann::json& r) {
  const bool compare = str_field(r, "kind") == "compare";
  std::string out =
      std::string("<table id=\"cases\"><thead><tr><th>#</th><th>") +
      (compare ? "dataset" : "split") +
      "</th><th>layout</th><th>verdict</th>"
      "<th>failed checks</th><th>cause</th><th>first numeric divergence</th><th>dispatch "
      "differences</th>"
      "<th>taps (min cosine)</th>" +
      std::string(compare ? "<th>mismatching elements</th><th>max ULP</th><th>cosine</th>"
                          : "<th>datasets</th>") +
      "<th>s</th></tr></thead><tbody>\n";
  for (const nlohmann::json& c : r["cases"]) {
    const std::string verdict = str_field(c, "verdict");
    std::string checks;
    for (const auto& f : c.value("failed_checks", nlohmann::json::array()))
      checks += (checks.empty() ? "" : ", ") + text_of(f);
    std::string dispatch;
    if (c.contains("dispatch")) {
      const nlohmann::json& d = c["dispatch"];
      dispatch = fmt::format(
          "{} mismatching events; first: forward {} event {} layer {} {}: {} at PP=1, {} here",
          c.value("dispatch_mismatches", 0), text_of(d.value("forward", nlohmann::json())),
          text_of(d.value("event", nlohmann::json())), text_of(d.value("layer", nlohmann::json())),
          str_field(d, "site"), str_field(d, "expected"), str_field(d, "actual"));
    } else if (c.value("dispatch_mismatches", 0) > 0) {
      dispatch = fmt::format("{} mismatching events", c.value("dispatch_mismatches", 0));
    }
    std::string taps;
    for (const nlohmann::json& t : c.value("taps", nlohmann::json::array())) {
      const bool ok = str_field(t, "verdict") == "pass";
      taps += fmt::format(
          "<span class=\"tap {}\" data-tap=\"{}\">{}: {} {:.6f}</span><br>",
          ok ? "v-pass" : "v-diverged", text_of(t.value("id", nlohmann::json())),
          text_of(t.value("id", nlohmann::json())),
          ok ? "pass"
             : esc(fmt::format("{} mismatches", text_of(t.value("mismatches", nlohmann::json())))),
          t.value("min_cosine", 1.0));
    }
    out += fmt::format(
        "<tr class=\"case case-{}\" data-key=\"{}\" data-index=\"{}\" data-verdict=\"{}\" "
        "data-first-layer=\"{}\">"
        "<td class=\"num\">{}</td><td><code>{}</code></td><td><code>{}</code></td><td "
        "class=\"v-{}\">{}</td>"
        "<td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td>{}"
        "<td class=\"num\">{:.2f}</td></tr>\n",
        esc(verdict), esc(str_field(c, "key")), text_of(c.value("index", nlohmann::json())),
        esc(verdict), first_divergent_layer(c), text_of(c.value("index", nlohmann::json())),
        esc(str_field(c, "key")), esc(str_field(c, "layout")), esc(verdict), esc(verdict),
        esc(checks), message_cell(r, c) + case_extra(c), esc(first_divergence_text(c)),
        esc(dispatch), taps, figure_cells(c, compare), c.value("seconds", 0.0));
  }
  out += "</tbody></table>\n";
  return out;
}

std::string stages_table(const nlohmann::json& r) {
  std::string out =
      "<table "
      "id=\"stages\"><thead><tr><th>split</th><th>stage</th><th>layers</th><th>embedding</th>"
      "<th>owned taps</th><th>parameter bytes</th><th>tensors</th></tr></thead><tbody>\n";
  for (const nlohmann::json& c : r["cases"]) {
    for (const nlohmann::json& s : c.value("stages", nlohmann::json::array())) {
      const nlohmann::json layers = s.value("layers", nlohmann::json::array());
      std::string taps;
      for (const auto& t : s.value("owned_taps", nlohmann::json::array()))
        taps += (taps.empty() ? "" : ", ") + text_of(t);
      out += fmt::format(
          "<tr class=\"stage-row\" data-key=\"{}\"><td><code>{}</code></td><td "
          "class=\"num\">{}</td>"
          "<td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td "
          "class=\"num\">{}</td></tr>\n",
          esc(str_field(c, "key")), esc(str_field(c, "key")),
          text_of(s.value("index", nlohmann::json())),
          layers.size() == 2 ? fmt::format("[{}, {})", text_of(layers[0]), text_of(layers[1]))
                             : esc(layers.dump()),
          esc(str_field(s, "embedding")), esc(taps),
          text_of(s.value("parameter_bytes", nlohmann::json())),
          text_of(s.value("tensors", nlohmann::json())));
    }
  }
  out += "</tbody></table>\n";
  return out;
}

// Bisect: the cause, where the first failing split diverged, the minimised scenario.
std::string cause_block(const nlohmann::json& b) {
  auto size = [](const nlohmann::json& z) {
    return fmt::format("{} layers, {} prompts, {} new tokens, {} prompt tokens, {} split points",
                       z.value("layers", 0), z.value("prompts", 0), z.value("max_new_tokens", 0),
                       z.value("max_prompt_tokens", 0), z.value("partitions", 0));
  };
  std::string out = "<h2>Cause</h2>\n<table id=\"cause\"><tbody>\n";
  if (b.contains("cause")) {
    const nlohmann::json& at = obj_field(b, "first_divergence");
    const nlohmann::json& repro = obj_field(b, "repro");
    out += fmt::format(
        "<tr><th>cause</th><td class=\"v-diverged\" data-cause=\"{}\">{}</td></tr>\n"
        "<tr><th>first failing split</th><td><code>{}</code></td></tr>\n"
        "<tr><th>first divergence</th><td>forward {} layer {} {} token {} channel {} "
        "<code>{}</code></td></tr>\n"
        "<tr><th>minimised scenario</th><td><code>{}</code></td></tr>\n"
        "<tr><th>replay</th><td><code>{}</code></td></tr>\n",
        esc(str_field(b, "cause")), esc(str_field(b, "cause")),
        esc(str_field(b, "first_failing_split")), at.value("forward", -1), at.value("layer", -1),
        esc(str_field(at, "site")), at.value("token", -1), at.value("channel", -1),
        esc(str_field(at, "dataset")), esc(str_field(repro, "path")),
        esc(str_field(repro, "replay")));
  } else {
    out += "<tr><th>cause</th><td>none: the sweep is conformant</td></tr>\n";
  }
  out += fmt::format("<tr><th>before</th><td>{}</td></tr>\n<tr><th>after</th><td>{}</td></tr>\n",
                     esc(size(obj_field(b, "before"))), esc(size(obj_field(b, "after"))));
  out += "</tbody></table>\n<ul class=\"steps small\">";
  for (const auto& s : b.value("steps", nlohmann::json::array()))
    out += "<li>" + esc(text_of(s)) + "</li>";
  return out + "</ul>\n";
}

// A generic table for an array of flat objects (the acceptance table).
std::string object_table(const char* id, const nlohmann::json& rows) {
  if (rows.is_object()) {
    std::string out = fmt::format("<table id=\"{}\"><tbody>\n", id);
    for (const auto& [k, v] : rows.items())
      out += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", esc(k), esc(text_of(v)));
    return out + "</tbody></table>\n";
  }
  if (!rows.is_array()) return "<pre>" + esc(rows.dump(2)) + "</pre>\n";
  std::vector<std::string> columns;
  std::set<std::string> seen;
  for (const nlohmann::json& row : rows)
    if (row.is_object())
      for (const auto& [k, v] : row.items())
        if (seen.insert(k).second) columns.push_back(k);
  std::string out = fmt::format("<table id=\"{}\"><thead><tr>", id);
  for (const std::string& c : columns) out += "<th>" + esc(c) + "</th>";
  out += "</tr></thead><tbody>\n";
  for (const nlohmann::json& row : rows) {
    out += "<tr class=\"row\">";
    for (const std::string& c : columns)
      out += "<td>" + esc(row.is_object() && row.contains(c) ? text_of(row[c]) : "") + "</td>";
    out += "</tr>\n";
  }
  return out + "</tbody></table>\n";
}

// PP=1's accepted-length histogram (the first acceptance row) as a two-row table with a
// bar per length; empty when the rows carry none.
std::string histogram_table(const nlohmann::json& rows) {
  if (!rows.is_array() || rows.empty() || !rows[0].is_object() ||
      !rows[0].contains("accepted_histogram") || !rows[0]["accepted_histogram"].is_array())
    return "";
  const nlohmann::json& h = rows[0]["accepted_histogram"];
  int64_t most = 1;
  for (const auto& n : h) most = std::max(most, n.is_number_integer() ? n.get<int64_t>() : 0);
  std::string head = "<tr><th>accepted length</th>", bars = "<tr><th>PP=1 steps</th>";
  for (size_t a = 0; a < h.size(); ++a) {
    const int64_t n = h[a].is_number_integer() ? h[a].get<int64_t>() : 0;
    head += fmt::format("<th>{}</th>", a);
    bars += fmt::format(
        "<td class=\"num\"><svg width=\"12\" height=\"40\"><rect x=\"0\" y=\"{}\" "
        "width=\"12\" height=\"{}\" fill=\"#0969da\"/></svg><br>{}</td>",
        40 - 40 * n / most, 40 * n / most, n);
  }
  return "<h3>Accepted lengths (PP=1)</h3>\n<table id=\"accepted-histogram\"><thead>" + head +
         "</tr></thead><tbody>" + bars + "</tr></tbody></table>\n";
}

// Serving (SPEC 3.4): one row per split point, one cell per request (pass or diverged),
// then every request against itself served alone at PP=1.
std::string serving_table(const nlohmann::json& sv) {
  if (!sv.is_object() || !sv.contains("requests") || !sv.contains("matrix")) return "";
  std::string out = "<table id=\"requests\"><thead><tr><th>split</th>";
  for (const auto& q : sv["requests"]) out += "<th>r" + esc(text_of(q)) + "</th>";
  out += "</tr></thead><tbody>\n";
  for (const auto& row : sv["matrix"]) {
    out += "<tr class=\"row\"><td>" + esc(str_field(row, "split")) + "</td>";
    for (const auto& v : row.value("requests", nlohmann::json::array())) {
      const std::string t = v.is_string() ? v.get<std::string>() : "?";
      out += fmt::format("<td class=\"{}\">{}</td>", t == "pass" ? "pass" : "diverged",
                         t == "pass" ? "=" : esc(t));
    }
    out += "</tr>\n";
  }
  out += "</tbody></table>\n";
  const nlohmann::json& bi = sv.value("batch_invariance", nlohmann::json::object());
  const bool required = !bi.contains("required") || bi["required"] != false;
  out += fmt::format(
      "<p id=\"batch-invariance\">Each request served alone at PP=1: {} of {} "
      "identical to the same request in the batch{}.</p>\n",
      esc(text_of(bi.value("identical", nlohmann::json(0)))),
      esc(text_of(bi.value("requests", nlohmann::json(0)))),
      required ? "" : " (measured: this backend does not promise batch invariance)");
  for (const auto& d : bi.value("differences", nlohmann::json::array()))
    out += "<p class=\"diverged\">" + esc(text_of(d)) + "</p>\n";
  for (const auto& d : bi.value("not_invariant", nlohmann::json::array()))
    out += "<p>" + esc(text_of(d)) + "</p>\n";
  return out;
}

// The engine's own word on itself (an external engine's), with PP=1's stderr tail.
std::string html_engine_table(const nlohmann::json& r) {
  std::string out;
  if (const auto rows = engine_rows(r); !rows.empty()) {
    out += "<table class=\"prov\" id=\"engine\"><tbody>\n";
    for (const auto& [k, v] : rows)
      out += fmt::format("<tr><td>{}</td><td><code>{}</code></td></tr>\n", esc(k), esc(v));
    const std::string tail = str_field(obj_field(r, "engine"), "pp1_stderr_tail");
    if (!tail.empty())
      out += "<tr><td>PP=1 stderr (tail)</td><td><pre>" + esc(tail) + "</pre></td></tr>\n";
    out += "</tbody></table>\n";
  }
  return out;
}

// The counts, one cell a verdict (data-count names it).
std::string html_counts(const nlohmann::json& r) {
  const nlohmann::json& counts = r["counts"];
  std::string out;
  // One column a verdict, in the outcome table's order (harness/judge/outcome.h), then total.
  out += "<table id=\"counts\"><thead><tr>";
  for (const CaseOutcome& o : case_outcomes()) out += fmt::format("<th>{}</th>", o.name);
  out += "<th>total</th></tr></thead><tbody><tr>";
  for (const CaseOutcome& o : case_outcomes())
    out += fmt::format("<td class=\"num\" data-count=\"{}\">{}</td>", o.count_key,
                       counts.value(std::string(o.count_key), 0));
  out += fmt::format("<td class=\"num\" data-count=\"total\">{}</td>", counts.value("total", 0));
  out += "</tr></tbody></table>\n";
  return out;
}

// What stands beside the counts: a refused self-check, the scenario's expectations, waived
// split points and expired waivers, the checks evaluated and those not judged.
std::string html_gate_notes(const nlohmann::json& r) {
  const std::string verdict = str_field(r, "verdict");
  std::string out;
  if (verdict == "refused") {
    const nlohmann::json& sc = obj_field(r, "self_check");
    out += fmt::format(
        "<p id=\"self-check\" class=\"diverged\" data-reproduced=\"false\">Self-check: PP=1 run "
        "twice gave different bits ({} of {} datasets differ), so no split point was judged. "
        "First difference: <code>{}</code></p>\n",
        sc.value("datasets_differing", 0), sc.value("datasets_compared", 0),
        esc(str_field(sc, "first_difference")));
  }
  if (r.contains("expect") && r["expect"].contains("failures")) {
    const nlohmann::json& fails = r["expect"]["failures"];
    const std::string why = str_field(r["expect"], "not_evaluated");
    out += fmt::format("<p id=\"expect\" data-met=\"{}\">Scenario expectations: <b>{}</b></p>\n",
                       fails.empty(),
                       !fails.empty() ? "NOT MET"
                       : why.empty()  ? "met"
                                      : esc(why));
    if (!fails.empty()) {
      out += "<ul class=\"expect-failures\">";
      for (const auto& f : fails) out += "<li>" + esc(text_of(f)) + "</li>";
      out += "</ul>\n";
    }
  }
  // Waived split points, apart from passes, and expired waivers (which fail the gate).
  std::string waived;
  for (const nlohmann::json& c : r.value("cases", nlohmann::json::array()))
    if (str_field(c, "verdict") == "waived")
      waived +=
          fmt::format("<li data-key=\"{}\"><code>{}</code>: {}</li>", esc(str_field(c, "key")),
                      esc(str_field(c, "key")), esc(waiver_line(c)));
  if (!waived.empty())
    out += "<p id=\"waived\">Waived (known divergences, not passes):</p><ul class=\"waived\">" +
           waived + "</ul>\n";
  if (const std::vector<std::string> expired = waiver_failures(r); !expired.empty()) {
    out += "<p id=\"waivers-expired\">Expired waivers: <b>the gate fails</b></p><ul>";
    for (const std::string& f : expired) out += "<li>" + esc(f) + "</li>";
    out += "</ul>\n";
  }
  if (r.contains("checks") && r["checks"].is_array()) {
    std::string names;
    for (const auto& c : r["checks"]) names += (names.empty() ? "" : ", ") + text_of(c);
    out += fmt::format("<p id=\"checks\">Checks evaluated: {}</p>\n", esc(names));
  }
  for (const std::string& line : rounding_lines(r))
    out += "<p id=\"rounded\"><b>" + esc(line) + "</b></p>\n";
  if (const std::vector<std::string> nj = not_judged_lines(r); !nj.empty()) {
    out +=
        "<p id=\"not-judged\">Checks <b>not judged</b> (no evidence in the dumps; not "
        "passed):</p><ul class=\"not-judged\">";
    for (const std::string& line : nj) out += "<li>" + esc(line) + "</li>";
    out += "</ul>\n";
  }
  return out;
}

// Provenance: the inputs or the scenario and model, who computed and judged, the lane, the
// injected faults, where stages ran, timing and what was computed.
std::string html_provenance(const nlohmann::json& r) {
  const nlohmann::json& scenario = obj_field(r, "scenario");
  const std::string kind = str_field(r, "kind", "sweep");
  const std::string name = str_field(scenario, "name");
  std::string out;
  out += "<h2>Provenance</h2>\n<table class=\"prov\" id=\"provenance\"><tbody>\n";
  if (kind == "compare") {
    const nlohmann::json& in = obj_field(r, "inputs");
    out += fmt::format(
        "<tr><td>golden (a)</td><td><code>{}</code></td></tr>\n<tr><td>candidate "
        "(b)</td><td><code>{}</code></td></tr>\n<tr><td>result</td><td "
        "id=\"summary\">{}</td></tr>\n",
        esc(str_field(in, "a")), esc(str_field(in, "b")), esc(str_field(r, "summary")));
    out +=
        fmt::format("<tr><td>digests</td><td id=\"digests\" data-digests=\"{}\">{}{}</td></tr>\n",
                    esc(str_field(r, "digests")),
                    str_field(r, "digests") == "trusted" ? "<b>UNVERIFIED</b>: " : "",
                    esc(str_field(r, "digests_rule")));
    if (const nlohmann::json& p = obj_field(r, "placement_judgement"); p.contains("judgement"))
      out += fmt::format(
          "<tr><td>placement</td><td id=\"placement\" data-placement=\"{}\">{}{}</td></tr>\n",
          esc(str_field(p, "judgement")),
          str_field(p, "judgement") == "not-judged" ? "<b>NOT JUDGED</b>: " : "",
          esc(str_field(p, "line")));
  } else {
    out +=
        fmt::format("<tr><td>scenario</td><td><code>{}</code> sha256 <code>{}</code></td></tr>\n",
                    esc(name), esc(str_field(scenario, "sha256")));
    out += fmt::format("<tr><td>model</td><td>sha256 <code>{}</code>, {} layers</td></tr>\n",
                       esc(str_field(scenario, "model_sha256")), scenario.value("layers", 0));
  }
  if (r.contains("provenance"))
    for (const auto& [k, v] : r["provenance"].items())
      out += fmt::format("<tr><td>{}{}</td><td><code>{}</code></td></tr>\n",
                         kind == "compare" ? "comparator " : "", esc(k), esc(text_of(v)));
  if (r.contains("lane"))
    out += fmt::format("<tr><td>lane</td><td>{}: {}</td></tr>\n", esc(str_field(r["lane"], "name")),
                       esc(str_field(r["lane"], "rule")));
  std::string faults;
  for (const nlohmann::json& f : r.value("faults", nlohmann::json::array()))
    faults += fmt::format("{}<code>{}</code> (caught by {}; restores: {})",
                          faults.empty() ? "" : "<br>", esc(str_field(f, "id")),
                          esc(str_field(f, "caught_by")), esc(str_field(f, "restores")));
  if (kind == "sweep")
    out += fmt::format("<tr><td>injected faults</td><td>{}</td></tr>\n",
                       faults.empty() ? "none" : faults);
  if (r.contains("placement"))
    out += fmt::format("<tr><td>stages ran</td><td>{}</td></tr>\n",
                       esc(placement_line(r["placement"])));
  for (size_t i = 0; i < r.value("placement_by_shard", nlohmann::json::array()).size(); ++i)
    out += fmt::format("<tr><td>shard {} stages ran</td><td>{}</td></tr>\n", i,
                       esc(placement_line(r["placement_by_shard"][i])));
  if (r.contains("timing"))
    out += fmt::format("<tr><td>timing</td><td>PP=1 {:.2f} s, sweep {:.2f} s {}</td></tr>\n",
                       r["timing"].value("pp1_seconds", 0.0),
                       r["timing"].value("total_seconds", 0.0), esc(parallelism_text(r)));
  if (r.contains("computed"))
    out += fmt::format("<tr><td>computed</td><td id=\"computed\">{}</td></tr>\n",
                       esc(computed_summary(r)));
  out += "</tbody></table>\n";
  return out;
}

// The page of a large sweep stays small (a few MB at 10,000 split points): it draws at most
// kShownCases split points in its map and tables, those that did not pass first (in index
// order), then passing ones. The counts, the gate notes and a first-divergence-per-layer
// table still cover every case, and report.json holds each of them.
constexpr size_t kShownCases = 300;

// The rows of `rows` (acceptance, the serving matrix) whose "split" is shown, with the
// first row kept where it is PP=1's.
nlohmann::json shown_rows(const nlohmann::json& rows, const std::set<std::string>& keys) {
  nlohmann::json out = nlohmann::json::array();
  for (const nlohmann::json& row : rows) {
    const std::string split = str_field(row, "split");
    if (split == "PP=1" || keys.count(split)) out.push_back(row);
  }
  return out;
}

// The report as this page shows it: `r` itself when it has at most kShownCases cases, else
// a copy holding the cases shown (each keeps its `index`) and their rows.
nlohmann::json page_view(const nlohmann::json& r) {
  const nlohmann::json& cases = r.value("cases", nlohmann::json::array());
  if (cases.size() <= kShownCases) return r;
  std::vector<size_t> shown;
  for (int pass_round = 0; pass_round < 2; ++pass_round)
    for (size_t i = 0; i < cases.size() && shown.size() < kShownCases; ++i)
      if ((str_field(cases[i], "verdict") == "pass") == (pass_round == 1)) shown.push_back(i);
  std::sort(shown.begin(), shown.end());
  nlohmann::json view = r;
  view["cases"] = nlohmann::json::array();
  std::set<std::string> keys;
  for (const size_t i : shown) {
    view["cases"].push_back(cases[i]);
    keys.insert(str_field(cases[i], "key"));
  }
  if (r.contains("acceptance") && r["acceptance"].is_array())
    view["acceptance"] = shown_rows(r["acceptance"], keys);
  if (r.contains("serving") && r["serving"].is_object() && r["serving"].contains("matrix"))
    view["serving"]["matrix"] = shown_rows(r["serving"]["matrix"], keys);
  return view;
}

// Said above the map of a page that does not draw every case: how many it draws, which, and
// where every split point first diverged, per layer, over all of them.
std::string omitted_cases_note(const nlohmann::json& r, const nlohmann::json& view) {
  const nlohmann::json& cases = r.value("cases", nlohmann::json::array());
  const size_t shown = view["cases"].size();
  if (shown == cases.size()) return "";
  std::map<int, size_t> first_at;
  size_t not_passed = 0;
  for (const nlohmann::json& c : cases) {
    const std::string verdict = str_field(c, "verdict");
    not_passed += verdict != "pass";
    if (verdict == "diverged") ++first_at[first_divergent_layer(c)];
  }
  std::string out = fmt::format(
      "<p id=\"cases-omitted\" class=\"note\" data-shown=\"{}\" data-total=\"{}\">This page "
      "shows {} of {} split points: {} that did not pass (of {}), then passing ones, in index "
      "order. Every split point is in report.json.</p>\n",
      shown, cases.size(), shown, cases.size(), std::min(not_passed, shown), not_passed);
  if (first_at.empty()) return out;
  out +=
      "<table id=\"first-divergence-by-layer\"><thead><tr><th>first divergence at layer</th>"
      "<th>split points (all)</th></tr></thead><tbody>\n";
  for (const auto& [layer, n] : first_at)
    out += fmt::format("<tr><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
                       layer >= 0 ? std::to_string(layer) : "no layer", n);
  return out + "</tbody></table>\n";
}

}  // namespace

std::string render_html(const nlohmann::json& report) {
  const nlohmann::json view = page_view(report);
  const nlohmann::json& r = view;
  const nlohmann::json& scenario = obj_field(r, "scenario");
  const std::string kind = str_field(r, "kind", "sweep");
  const std::string verdict = str_field(r, "verdict");
  const std::string name = str_field(scenario, "name");
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  out +=
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
      "'unsafe-inline'; img-src data:\">\n";
  out += fmt::format("<title>splitcheck {}: {}</title>\n<style>{}</style></head><body>\n",
                     esc(name), esc(verdict), kStyle);
  out += fmt::format(
      "<header><h1>splitcheck {} <code>{}</code></h1>\n<p><span id=\"verdict\" class=\"verdict "
      "{}\" "
      "data-verdict=\"{}\" data-exit-code=\"{}\">{}</span></p>\n",
      esc(str_field(r, "kind", "sweep")), esc(name),
      esc(r.value("exit_code", 0) != 0 ? std::string("divergent") : verdict), esc(verdict),
      text_of(r.value("exit_code", nlohmann::json())),
      esc(verdict == "refused" ? "REFUSED: PP=1 does not reproduce itself; no split point judged"
          : verdict == "error" ? "ERROR: PP=1 gave no reference; no split point judged (" +
                                     str_field(r, "reference_failure") + ")"
          : verdict == "no-data"
              ? (r.value("exit_code", 0) != 0
                     ? "NO DATA COMPARED: every split point passed, but its selected checks "
                       "compared no data"
                     : "NO DATA COMPARED, as the scenario's expect asks: its selected checks "
                       "compared no data")
          : verdict != "conformant" ? "DIVERGENT"
          : r.value("exit_code", 0) == 0 && !rounding_lines(r).empty()
              ? "CONFORMANT AFTER ROUNDING: equal, but some datasets were narrowed by their "
                "writer before the comparison (not the engine's own bits)"
          : kind == "compare" ? "CONFORMANT: the dumps are bit-identical"
          : r.value("exit_code", 0) != 0 && !waiver_failures(r).empty()
              ? "FAILED: a waiver of this scenario has expired"
          : r.value("exit_code", 0) != 0
              ? "FAILED: every split point is bit-identical to PP=1, but the scenario's expect "
                "is not met"
              : "CONFORMANT: every split point is bit-identical to PP=1"));
  out += html_engine_table(r);
  out += html_counts(r);
  out += html_gate_notes(r);
  out += html_provenance(r);
  if (kind == "compare") {
    out += "<h2>Inputs: who produced each dump</h2>\n" + inputs_provenance_table(r);
    out += "<h2>Mismatch fraction per layer</h2>\n" + layer_chart_svg(r);
  }
  out += "</header>\n";
  if (kind == "bisect") out += cause_block(obj_field(r, "bisect"));
  if (kind == "sweep")
    out += "<h2>Where each split point first diverged</h2>\n" + omitted_cases_note(report, view) +
           map_svg(r);
  out +=
      std::string(kind == "compare" ? "<h2>Differing datasets</h2>\n" : "<h2>Split points</h2>\n") +
      cases_table(r);
  if (r.contains("acceptance")) {
    out += "<h2>Acceptance against PP=1</h2>\n" + object_table("acceptance", r["acceptance"]);
    out += histogram_table(r["acceptance"]);
  }
  if (r.contains("serving"))
    out += "<h2>Requests x split points</h2>\n" + serving_table(r["serving"]);
  if (kind == "sweep") out += "<h2>Embedding and memory per stage</h2>\n" + stages_table(r);
  out += "<h2>Reproduce</h2>\n<pre id=\"command\">" + esc(str_field(r, "command")) + "</pre>\n";
  out += "</body></html>\n";
  return out;
}

}  // namespace splitcheck
