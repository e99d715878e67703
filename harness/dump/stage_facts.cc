#include "harness/dump/stage_facts.h"

#include <fmt/format.h>

#include <charconv>

namespace splitcheck {
namespace {

using Attrs = std::map<std::string, AttrValue>;

// An integer attribute: an int64 as written here, or an integer's text (what a reader of
// another writer's file may hold). Anything else is not recorded.
std::optional<int64_t> int_of(const Attrs& a, const char* name) {
  auto it = a.find(name);
  if (it == a.end()) return std::nullopt;
  if (const int64_t* v = std::get_if<int64_t>(&it->second)) return *v;
  const std::string* text = std::get_if<std::string>(&it->second);
  if (text == nullptr || text->empty()) return std::nullopt;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  if (ec != std::errc() || end != text->data() + text->size()) return std::nullopt;
  return v;
}

std::string text_of(const Attrs& a, const char* name) {
  auto it = a.find(name);
  if (it == a.end()) return "";
  if (const std::string* s = std::get_if<std::string>(&it->second)) return *s;
  if (const int64_t* v = std::get_if<int64_t>(&it->second)) return std::to_string(*v);
  return fmt::format("{}", std::get<double>(it->second));
}

std::optional<bool> flag_of(const Attrs& a, const char* name) {
  const std::optional<int64_t> v = int_of(a, name);
  if (!v || (*v != 0 && *v != 1)) return std::nullopt;
  return *v == 1;
}

StageFacts facts_of(int index, const Attrs& a) {
  StageFacts f;
  f.index = index;
  f.layer_begin = int_of(a, "layer_begin");
  f.layer_end = int_of(a, "layer_end");
  f.embedding = text_of(a, "embedding");
  f.placed_embedding = text_of(a, "placed_embedding");
  f.parameter_bytes = int_of(a, "parameter_bytes");
  f.placed_parameter_bytes = int_of(a, "placed_parameter_bytes");
  f.held_tensors = int_of(a, "held_tensors");
  f.held_storages = int_of(a, "held_storages");
  f.embedding_storage = text_of(a, "embedding_storage");
  f.drafter_embedding_storage = text_of(a, "drafter_embedding_storage");
  f.head_storage = text_of(a, "head_storage");
  f.head_tied = flag_of(a, "head_tied");
  f.drafter_method = text_of(a, "drafter_method");
  f.drafter_embedding = text_of(a, "drafter_embedding");
  f.drafter_same_object_as_target = flag_of(a, "drafter_same_object_as_target");
  f.refusal_probe = text_of(a, "refusal_probe");
  f.refusal_status = text_of(a, "refusal_status");
  f.refusal_clear = flag_of(a, "refusal_clear");
  return f;
}

}  // namespace

void record_stage_facts(const StageFacts& f, RunRecord& record) {
  const std::string g = "stages/" + std::to_string(f.index);
  auto put_int = [&](const char* name, const std::optional<int64_t>& v) {
    if (v) record.set_attr(g, name, *v);
  };
  auto put_text = [&](const char* name, const std::string& v) {
    if (!v.empty()) record.set_attr(g, name, v);
  };
  auto put_flag = [&](const char* name, const std::optional<bool>& v) {
    if (v) record.set_attr(g, name, int64_t{*v ? 1 : 0});
  };
  put_int("layer_begin", f.layer_begin);
  put_int("layer_end", f.layer_end);
  put_text("embedding", f.embedding);
  put_text("placed_embedding", f.placed_embedding);
  put_int("parameter_bytes", f.parameter_bytes);
  put_int("placed_parameter_bytes", f.placed_parameter_bytes);
  put_int("held_tensors", f.held_tensors);
  put_int("held_storages", f.held_storages);
  put_text("embedding_storage", f.embedding_storage);
  put_text("drafter_embedding_storage", f.drafter_embedding_storage);
  put_text("head_storage", f.head_storage);
  put_flag("head_tied", f.head_tied);
  put_text("drafter_method", f.drafter_method);
  put_text("drafter_embedding", f.drafter_embedding);
  put_flag("drafter_same_object_as_target", f.drafter_same_object_as_target);
  put_text("refusal_probe", f.refusal_probe);
  put_text("refusal_status", f.refusal_status);
  put_flag("refusal_clear", f.refusal_clear);
}

StageEvidence stage_evidence_of(const RunRecord& record) {
  StageEvidence ev;
  for (int s = 0;; ++s) {
    auto it = record.attrs().find("stages/" + std::to_string(s));
    if (it == record.attrs().end()) break;
    ev.stages.push_back(facts_of(s, it->second));
  }
  ev.drafter_ran = record.find("spec/accepted_histogram") != nullptr;
  return ev;
}

bool is_clear_refusal(const std::string& status, const std::string& answer, int stage,
                      const std::string& method) {
  return status == "config-rejected" && !method.empty() &&
         answer.find(fmt::format("stage {}", stage)) != std::string::npos &&
         answer.find(method) != std::string::npos;
}

}  // namespace splitcheck
