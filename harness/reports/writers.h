// Renderers of the report model (see report.h): each takes the JSON model, as written
// to report.json, and returns the text of one file. They read only the model, so a
// merged report renders exactly like an unsharded one.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "harness/reports/escape.h"

namespace splitcheck {

// report.html: one self-contained page (inline CSS and SVG, no script, no network).
std::string render_html(const nlohmann::json& report);

// junit.xml: one <testcase> per split point.
std::string render_junit(const nlohmann::json& report);

// summary.md: a verdict line, the counts and the first divergences, for a PR comment.
std::string render_markdown(const nlohmann::json& report);

// The first layer where a case diverged: the earliest of its first dispatch mismatch, its
// first numeric divergence and (bisect) its location; -1 when none names a layer.
int first_divergent_layer(const nlohmann::json& case_json);

// A JSON object field, or an empty object when it is absent (compare reports have no
// scenario).
const nlohmann::json& obj_field(const nlohmann::json& j, const char* key);

// A JSON string field, or `fallback` when it is absent or not a string.
std::string str_field(const nlohmann::json& j, const char* key, const std::string& fallback = "");

// One line on speculative decoding for the text forms (JUnit, Markdown): PP=1's steps,
// acceptance rate, tokens per forward and accepted-length histogram ("a=0: n, ..."), and
// how many split points have PP=1's figures. Empty when the report has no acceptance.
std::string acceptance_line(const nlohmann::json& report);

// A waived case's waivers as one line: "waived: <reason> (<link>, expires <date>)" for
// each (waivers.h); empty when the case carries none.
std::string waiver_line(const nlohmann::json& case_json);

// How the split points ran at once, in the words the user asked with: "with 2 jobs" for an
// external engine's sweep (--jobs), "on 2 threads" for the built-in engine's (--threads).
std::string parallelism_text(const nlohmann::json& report);

// A compare case's figures as one line: "3 of 512 elements differ (0.59%), max ULP 2,
// cosine 0.99999"; empty when the case has no numeric difference.
std::string dataset_figures(const nlohmann::json& case_json);

// The report's expired waivers (`waivers.failures`), one line each.
std::vector<std::string> waiver_failures(const nlohmann::json& report);

// External engines (harness/reports/external_report.cc): the rows that open the report (the PP=1
// command as run, PP=1's outcome, the settings requested and in effect, splitcheck's
// version); empty for a report of the built-in engine.
std::vector<std::pair<std::string, std::string>> engine_rows(const nlohmann::json& report);

// "<check>: not judged (<reason>)" for each check the dumps gave no evidence for, from the
// `not_judged` array of a report or of a case.
std::vector<std::string> not_judged_lines(const nlohmann::json& report_or_case);

// "COMPARED AFTER ROUNDING: ..." for a report, "compared after rounding: ..." for a case,
// from its `rounded` object (the datasets a writer narrowed, so their equality is after
// rounding, not of the engine's own bits); empty when nothing was narrowed.
std::vector<std::string> rounding_lines(const nlohmann::json& report_or_case);

// A report's `rounded` object from its cases' (cases, datasets, the first few examples);
// null when no case compared a narrowed dataset.
nlohmann::json rounding_summary(const nlohmann::json& cases);

// An argv array as one line a reader could type (elements quoted where needed); for
// display only: the runner never hands it to a shell.
std::string display_argv(const nlohmann::json& argv);

}  // namespace splitcheck
