#include "reference/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <sstream>

#include "reference/splitmix.h"

namespace splitcheck {

std::string Problem::prompt() const { return "Question: " + question + "\nAnswer:"; }

std::string Problem::reference() const {
  return "Question: " + question + "\nAnswer: " + solution + " #### " + std::to_string(answer);
}

namespace {

// The random draws of one problem: the i-th draw is splitmix64(key + i * golden), where
// the key depends only on the seed and the problem index. Reduction by modulo keeps the
// output defined by integer arithmetic alone; its tiny bias does not matter here.
class ProblemDraws {
 public:
  ProblemDraws(uint64_t seed, uint64_t index)
      : key_(splitmix64(seed ^ splitmix64(index * 0xd1b54a32d192ed03ull + 1))) {}

  // A uniform integer in [lo, hi].
  int uniform(int lo, int hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    const uint64_t r = splitmix64(key_ + 0x9e3779b97f4a7c15ull * counter_++);
    return lo + static_cast<int>(r % span);
  }

  template <size_t N>
  const char* pick(const std::array<const char*, N>& words) {
    return words[static_cast<size_t>(uniform(0, static_cast<int>(N) - 1))];
  }

  // Two different entries of `words`.
  template <size_t N>
  std::pair<const char*, const char*> pick_two(const std::array<const char*, N>& words) {
    const int n = static_cast<int>(N);
    const int i = uniform(0, n - 1);
    const int j = (i + uniform(1, n - 1)) % n;
    return {words[static_cast<size_t>(i)], words[static_cast<size_t>(j)]};
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

// Word lists are short on purpose: the prompts must stay within 60..120 bytes.
constexpr std::array<const char*, 12> kNames = {"Ava", "Ben",  "Mia",  "Leo", "Zoe",  "Sam",
                                                "Ivy", "Omar", "Lily", "Max", "Nora", "Raj"};
constexpr std::array<const char*, 8> kThings = {"apples",  "pencils", "stickers", "marbles",
                                                "cookies", "shells",  "cards",    "beads"};
constexpr std::array<const char*, 6> kGoods = {"notebooks", "pens",   "cupcakes",
                                               "tickets",   "plants", "comics"};
constexpr std::array<const char*, 6> kSingleGoods = {"book", "kite", "lamp", "ball", "mug", "hat"};
constexpr std::array<const char*, 5> kVehicles = {"bus", "train", "truck", "boat", "van"};

// Each template writes one problem; solution steps read "a op b = c." with exact
// non-negative integer results so a test can recompute them.
Problem buy_items(ProblemDraws& d) {
  const char* name = d.pick(kNames);
  const char* goods = d.pick(kGoods);
  const int n = d.uniform(2, 9), price = d.uniform(2, 12);
  return {fmt::format("{} buys {} {} at ${} each. How many dollars does {} spend?", name, n, goods,
                      price, name),
          fmt::format("{} * {} = {}.", n, price, n * price), n * price};
}

Problem share_equally(ProblemDraws& d) {
  const char* name = d.pick(kNames);
  const char* things = d.pick(kThings);
  const int each = d.uniform(2, 12), friends = d.uniform(2, 8);
  const int total = each * friends;
  return {fmt::format("{} shares {} {} equally among {} friends. How many does each friend get?",
                      name, total, things, friends),
          fmt::format("{} / {} = {}.", total, friends, each), each};
}

Problem speed_time(ProblemDraws& d) {
  const char* vehicle = d.pick(kVehicles);
  const int speed = d.uniform(10, 90), hours = d.uniform(2, 6);
  return {fmt::format("A {} travels at {} km per hour for {} hours. How many km does it travel?",
                      vehicle, speed, hours),
          fmt::format("{} * {} = {}.", speed, hours, speed * hours), speed * hours};
}

Problem make_change(ProblemDraws& d) {
  constexpr std::array<int, 3> kBills = {10, 20, 50};
  const char* name = d.pick(kNames);
  const char* good = d.pick(kSingleGoods);
  const int bill = kBills[static_cast<size_t>(d.uniform(0, 2))];
  const int price = d.uniform(1, bill - 1);
  return {fmt::format("{} pays with a ${} bill for a {} that costs ${}. How much change is due?",
                      name, bill, good, price),
          fmt::format("{} - {} = {}.", bill, price, bill - price), bill - price};
}

Problem packs_then_give(ProblemDraws& d) {
  const char* name = d.pick(kNames);
  const char* things = d.pick(kThings);
  const int have = d.uniform(3, 20), packs = d.uniform(2, 5), per_pack = d.uniform(2, 10);
  const int bought = packs * per_pack, sum = have + bought;
  const int given = d.uniform(1, sum);
  return {fmt::format("{} has {} {}, buys {} packs of {}, then gives away {}. How many are left?",
                      name, have, things, packs, per_pack, given),
          fmt::format("{} * {} = {}. {} + {} = {}. {} - {} = {}.", packs, per_pack, bought, have,
                      bought, sum, sum, given, sum - given),
          sum - given};
}

Problem weekly_savings(ProblemDraws& d) {
  const char* name = d.pick(kNames);
  const int weekly = d.uniform(3, 15), weeks = d.uniform(2, 8);
  const int saved = weekly * weeks;
  const int spent = d.uniform(1, saved);
  return {
      fmt::format("{} saves ${} each week for {} weeks, then spends ${}. How many dollars "
                  "are left?",
                  name, weekly, weeks, spent),
      fmt::format("{} * {} = {}. {} - {} = {}.", weekly, weeks, saved, saved, spent, saved - spent),
      saved - spent};
}

Problem steady_rate(ProblemDraws& d) {
  const char* vehicle = d.pick(kVehicles);
  const int speed = d.uniform(10, 60), hours = d.uniform(2, 5), later = d.uniform(2, 8);
  const int distance = speed * hours;
  return {fmt::format("A {} goes {} km in {} hours at a steady speed. How far does it go in {} "
                      "hours?",
                      vehicle, distance, hours, later),
          fmt::format("{} / {} = {}. {} * {} = {}.", distance, hours, speed, speed, later,
                      speed * later),
          speed * later};
}

Problem free_chairs(ProblemDraws& d) {
  const int rows = d.uniform(3, 12), per_row = d.uniform(4, 15);
  const int seats = rows * per_row;
  const int taken = d.uniform(1, seats - 1);
  return {
      fmt::format("A hall has {} rows of {} chairs. {} chairs are taken. How many are free?", rows,
                  per_row, taken),
      fmt::format("{} * {} = {}. {} - {} = {}.", rows, per_row, seats, seats, taken, seats - taken),
      seats - taken};
}

Problem more_than(ProblemDraws& d) {
  const auto [first, second] = d.pick_two(kNames);
  const char* things = d.pick(kThings);
  const int a = d.uniform(2, 40), more = d.uniform(1, 25);
  const int b = a + more;
  return {fmt::format("{} has {} {}. {} has {} more than {}. How many do they have together?",
                      first, a, things, second, more, first),
          fmt::format("{} + {} = {}. {} + {} = {}.", a, more, b, a, b, a + b), a + b};
}

Problem reading_days(ProblemDraws& d) {
  const char* name = d.pick(kNames);
  const int per_day = d.uniform(5, 30), days = d.uniform(2, 12);
  const int pages = per_day * days;
  return {fmt::format("{} reads {} pages a day. A book has {} pages. How many days does {} need?",
                      name, per_day, pages, name),
          fmt::format("{} / {} = {}.", pages, per_day, days), days};
}

Problem two_purchases(ProblemDraws& d) {
  const char* name = d.pick(kNames);
  const int pens = d.uniform(2, 9), pen_price = d.uniform(1, 5);
  const int cards = d.uniform(2, 9), card_price = d.uniform(2, 8);
  const int x = pens * pen_price, y = cards * card_price;
  return {fmt::format("{} buys {} pens at ${} each and {} cards at ${} each. What is the total?",
                      name, pens, pen_price, cards, card_price),
          fmt::format("{} * {} = {}. {} * {} = {}. {} + {} = {}.", pens, pen_price, x, cards,
                      card_price, y, x, y, x + y),
          x + y};
}

using ProblemTemplate = Problem (*)(ProblemDraws&);

// Every template, in one place; adding one is one row plus its function.
constexpr std::array<ProblemTemplate, 11> kTemplates = {
    buy_items,   share_equally, speed_time, make_change,  packs_then_give, weekly_savings,
    steady_rate, free_chairs,   more_than,  reading_days, two_purchases,
};

// Parses an integer of digits and commas starting at text[pos] (a digit), with `negative`
// from a sign already consumed. nullopt on int64 overflow.
std::optional<int64_t> parse_grouped_integer(std::string_view text, size_t pos, bool negative) {
  // Accumulate as a negative value so that INT64_MIN is representable.
  int64_t value = 0;
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  for (; pos < text.size(); ++pos) {
    const char c = text[pos];
    if (c == ',') {
      if (pos + 1 < text.size() && text[pos + 1] >= '0' && text[pos + 1] <= '9') continue;
      break;
    }
    if (c < '0' || c > '9') break;
    const int digit = c - '0';
    if (value < (kMin + digit) / 10) return std::nullopt;
    value = value * 10 - digit;
  }
  if (negative) return value;
  if (value == kMin) return std::nullopt;
  return -value;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

std::vector<Problem> generate_gsm8k_style(uint64_t seed, int count) {
  std::vector<Problem> problems;
  problems.reserve(static_cast<size_t>(std::max(count, 0)));
  for (int i = 0; i < count; ++i) {
    ProblemDraws draws(seed, static_cast<uint64_t>(i));
    const auto which =
        static_cast<size_t>(draws.uniform(0, static_cast<int>(kTemplates.size()) - 1));
    problems.push_back(kTemplates[which](draws));
  }
  return problems;
}

std::vector<int32_t> tokenize_bytes(std::string_view text) {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<int32_t>(static_cast<unsigned char>(c)));
  return ids;
}

std::string detokenize(std::span<const int32_t> ids) {
  std::string text;
  text.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && id <= 255) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    } else {
      text += "<" + std::to_string(id) + ">";
    }
  }
  return text;
}

std::optional<int64_t> extract_strict(std::string_view text) {
  const size_t marker = text.rfind("####");
  if (marker == std::string_view::npos) return std::nullopt;
  size_t pos = marker + 4;
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;
  bool negative = false;
  if (pos < text.size() && (text[pos] == '-' || text[pos] == '+')) {
    negative = text[pos] == '-';
    ++pos;
  }
  if (pos >= text.size() || !is_digit(text[pos])) return std::nullopt;
  return parse_grouped_integer(text, pos, negative);
}

std::optional<int64_t> extract_flexible(std::string_view text) {
  // Walk back from the end to the last digit, then to the start of its run of digits and
  // digit-separating commas.
  size_t end = text.size();
  while (end > 0 && !is_digit(text[end - 1])) --end;
  if (end == 0) return std::nullopt;
  size_t start = end - 1;
  while (start > 0) {
    const char c = text[start - 1];
    if (is_digit(c)) {
      --start;
    } else if (c == ',' && start >= 2 && is_digit(text[start - 2])) {
      --start;
    } else {
      break;
    }
  }
  const bool negative = start > 0 && text[start - 1] == '-';
  return parse_grouped_integer(text.substr(0, end), start, negative);
}

nlohmann::json workload_to_json(uint64_t seed, const std::vector<Problem>& problems) {
  nlohmann::json items = nlohmann::json::array();
  for (const Problem& p : problems) {
    items.push_back({{"question", p.question}, {"solution", p.solution}, {"answer", p.answer}});
  }
  return {{"format", "splitcheck.workload"},
          {"format_version", 1},
          {"generator", "gsm8k-style"},
          {"seed", seed},
          {"problems", std::move(items)}};
}

namespace {

// Looks up `key` in `object` (at JSON pointer `where`); the error names the key's pointer.
Result<const nlohmann::json*> member(const nlohmann::json& object, const std::string& where,
                                     const char* key) {
  const auto it = object.find(key);
  if (it == object.end()) return invalid_input(where + "/" + key + ": missing");
  return &*it;
}

Result<std::string> string_member(const nlohmann::json& object, const std::string& where,
                                  const char* key) {
  ASSIGN_OR_RETURN(const nlohmann::json* value, member(object, where, key));
  if (!value->is_string()) return invalid_input(where + "/" + key + ": expected string");
  return value->get<std::string>();
}

Result<int64_t> integer_member(const nlohmann::json& object, const std::string& where,
                               const char* key) {
  ASSIGN_OR_RETURN(const nlohmann::json* value, member(object, where, key));
  if (!value->is_number_integer()) return invalid_input(where + "/" + key + ": expected integer");
  if (value->is_number_unsigned() &&
      value->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return invalid_input(where + "/" + key + ": integer out of range");
  }
  return value->get<int64_t>();
}

Result<std::vector<Problem>> parse_workload(const nlohmann::json& root) {
  if (!root.is_object()) return invalid_input("expected a JSON object at the root");
  ASSIGN_OR_RETURN(const std::string format, string_member(root, "", "format"));
  if (format != "splitcheck.workload") {
    return invalid_input("/format: expected \"splitcheck.workload\", got \"" + format + "\"");
  }
  ASSIGN_OR_RETURN(const int64_t version, integer_member(root, "", "format_version"));
  if (version != 1) {
    return invalid_input("/format_version: unsupported version " + std::to_string(version));
  }
  if (root.contains("generator") && !root["generator"].is_string()) {
    return invalid_input("/generator: expected string");
  }
  if (root.contains("seed") && !root["seed"].is_number_unsigned()) {
    return invalid_input("/seed: expected non-negative integer");
  }
  ASSIGN_OR_RETURN(const nlohmann::json* items, member(root, "", "problems"));
  if (!items->is_array()) return invalid_input("/problems: expected array");

  std::vector<Problem> problems;
  problems.reserve(items->size());
  for (size_t i = 0; i < items->size(); ++i) {
    const std::string where = "/problems/" + std::to_string(i);
    const nlohmann::json& item = (*items)[i];
    if (!item.is_object()) return invalid_input(where + ": expected object");
    Problem p;
    ASSIGN_OR_RETURN(p.question, string_member(item, where, "question"));
    ASSIGN_OR_RETURN(p.solution, string_member(item, where, "solution"));
    ASSIGN_OR_RETURN(p.answer, integer_member(item, where, "answer"));
    problems.push_back(std::move(p));
  }
  return problems;
}

}  // namespace

Result<std::vector<Problem>> load_workload(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_input(path + ": cannot open file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(buffer.str());
  } catch (const nlohmann::json::parse_error& e) {
    return invalid_input(path + ": malformed JSON: " + e.what());
  }
  Result<std::vector<Problem>> problems = parse_workload(root);
  if (!problems.is_ok()) return problems.status().with_context(path);
  return problems;
}

}  // namespace splitcheck
