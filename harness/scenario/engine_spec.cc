#include "harness/scenario/engine_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "harness/scenario/suggest.h"

namespace splitcheck {
namespace {

using nlohmann::json;

bool known_placeholder(const std::string& name) {
  return std::any_of(std::begin(kEnginePlaceholders), std::end(kEnginePlaceholders),
                     [&](const char* p) { return name == p; });
}

std::string resolve(const std::string& path, const std::string& base_dir) {
  std::filesystem::path p(path);
  if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
  return p.lexically_normal().string();
}

// Walks `text` once: literal runs go to `literal`, each {name} to `placeholder`. Returns
// what is malformed, or empty.
template <typename Literal, typename Placeholder>
std::string scan(const std::string& text, Literal literal, Placeholder placeholder) {
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '{' && i + 1 < text.size() && text[i + 1] == '{') {
      literal('{');
      ++i;
    } else if (c == '}' && i + 1 < text.size() && text[i + 1] == '}') {
      literal('}');
      ++i;
    } else if (c == '{') {
      const size_t close = text.find('}', i);
      if (close == std::string::npos)
        return fmt::format("unclosed '{{' at character {} (write '{{{{' for a literal brace)", i);
      const std::string name = text.substr(i + 1, close - i - 1);
      if (!known_placeholder(name))
        return fmt::format(
            "unknown placeholder {{{}}}{} (known: {{{}}})", name,
            did_you_mean(name, std::vector<std::string_view>(std::begin(kEnginePlaceholders),
                                                             std::end(kEnginePlaceholders))),
            fmt::join(kEnginePlaceholders, "}, {"));
      placeholder(name);
      i = close;
    } else if (c == '}') {
      return fmt::format("unmatched '}}' at character {} (write '}}}}' for a literal brace)", i);
    } else {
      literal(c);
    }
  }
  return "";
}

}  // namespace

std::string template_error(const std::string& text) {
  return scan(
      text, [](char) {}, [](const std::string&) {});
}

std::string expand_template(const std::string& text,
                            const std::map<std::string, std::string>& values) {
  std::string out;
  scan(
      text, [&](char c) { out += c; },
      [&](const std::string& name) {
        auto it = values.find(name);
        if (it != values.end()) out += it->second;
      });
  return out;
}

std::vector<std::string> expand_command(const ExternalEngine& e,
                                        const std::map<std::string, std::string>& values) {
  std::vector<std::string> argv;
  for (const std::string& t : e.command) argv.push_back(expand_template(t, values));
  return argv;
}

Result<ExternalEngine> parse_external_engine(const json& j, const std::string& source,
                                             const std::string& base_dir) {
  auto error = [&](const std::string& ptr, const std::string& what) {
    return invalid_input(fmt::format("{}: /engine{}: {}", source, ptr, what));
  };
  auto type_error = [&](const std::string& ptr, const json& v, const char* expected) {
    return error(ptr, fmt::format("expected {}, got {}", expected, v.type_name()));
  };
  ExternalEngine e;
  const json& cmd = j.at("command");
  if (!cmd.is_array()) return type_error("/command", cmd, "array of strings");
  if (cmd.empty()) return error("/command", "expected at least the program");
  for (size_t i = 0; i < cmd.size(); ++i) {
    const std::string ptr = fmt::format("/command/{}", i);
    if (!cmd[i].is_string()) return type_error(ptr, cmd[i], "string");
    const std::string t = cmd[i].get<std::string>();
    if (const std::string why = template_error(t); !why.empty()) return error(ptr, why);
    if (t.find('\0') != std::string::npos) return error(ptr, "contains a NUL character");
    e.command.push_back(t);
  }
  if (e.command[0].empty()) return error("/command/0", "the program must not be empty");
  e.cwd = base_dir;
  if (auto it = j.find("cwd"); it != j.end()) {
    if (!it->is_string()) return type_error("/cwd", *it, "string");
    e.cwd = resolve(it->get<std::string>(), base_dir);
  }
  if (auto it = j.find("env"); it != j.end()) {
    if (!it->is_object()) return type_error("/env", *it, "object of strings");
    for (const auto& [key, value] : it->items()) {
      const std::string ptr = "/env/" + key;
      if (key.empty() || key.find('=') != std::string::npos || key.find('\0') != std::string::npos)
        return error(ptr, "not a valid environment variable name");
      if (!value.is_string()) return type_error(ptr, value, "string");
      e.env.emplace_back(key, value.get<std::string>());
    }
  }
  if (auto it = j.find("timeout_s"); it != j.end()) {
    if (!it->is_number()) return type_error("/timeout_s", *it, "number");
    const double t = it->get<double>();
    if (!(t > 0) || !std::isfinite(t) || t > 7 * 24 * 3600)
      return error("/timeout_s",
                   "must be a positive number of seconds (at most a week), got " + it->dump());
    e.timeout_s = t;
  }
  auto layers = [&](const char* key, int* out, bool required) -> Status {
    auto it = j.find(key);
    if (it == j.end()) {
      if (required)
        return error("", fmt::format("\"{}\" is required with \"command\": the partitions "
                                     "enumerate from it",
                                     key));
      return Status::ok();
    }
    if (!it->is_number_integer()) return type_error(std::string("/") + key, *it, "integer");
    const int64_t v = it->get<int64_t>();
    if (v < 1 || v > 256)
      return error(std::string("/") + key, "must be in 1..256, got " + it->dump());
    *out = static_cast<int>(v);
    return Status::ok();
  };
  RETURN_IF_ERROR(layers("num_hidden_layers", &e.num_hidden_layers, true));
  RETURN_IF_ERROR(layers("attn_res_block_size", &e.attn_res_block_size, false));
  if (auto it = j.find("golden"); it != j.end()) {
    if (!it->is_string()) return type_error("/golden", *it, "string");
    if (!it->get<std::string>().empty()) e.golden = resolve(it->get<std::string>(), base_dir);
  }
  if (auto it = j.find("seed"); it != j.end()) {
    if (!it->is_number_integer()) return type_error("/seed", *it, "integer");
    e.seed = it->get<int64_t>();
  }
  if (auto it = j.find("evidence"); it != j.end()) {
    // Only an explicit waiver with its reason; anything else is a mistake to name.
    const json& ev = *it;
    if (!ev.is_object()) return type_error("/evidence", ev, "object {\"waived\": \"<reason>\"}");
    for (const auto& [key, value] : ev.items())
      if (key != "waived") return error("/evidence/" + key, "unknown key (known: waived)");
    auto w = ev.find("waived");
    if (w == ev.end()) return error("/evidence", "expected {\"waived\": \"<reason>\"}");
    if (!w->is_string()) return type_error("/evidence/waived", *w, "string (the reason)");
    if (w->get<std::string>().find_first_not_of(" \t\n") == std::string::npos)
      return error("/evidence/waived", "a waiver needs its reason (a non-empty string)");
    e.evidence_waived = w->get<std::string>();
  }
  return e;
}

json external_engine_json(const ExternalEngine& e) {
  json env = json::object();
  for (const auto& [k, v] : e.env) env[k] = v;
  json j{{"command", e.command},
         {"cwd", e.cwd},
         {"env", env},
         {"timeout_s", e.timeout_s},
         {"num_hidden_layers", e.num_hidden_layers}};
  if (e.attn_res_block_size > 0) j["attn_res_block_size"] = e.attn_res_block_size;
  if (!e.golden.empty()) j["golden"] = e.golden;
  j["seed"] = e.seed;
  if (!e.evidence_waived.empty()) j["evidence"] = {{"waived", e.evidence_waived}};
  return j;
}

}  // namespace splitcheck
