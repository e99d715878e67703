// Tests of the GSM8K-style workload: generator, tokenisation, scoring, workload file.
#include "reference/workload.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace splitcheck {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A file under the test's temporary directory, removed when the test ends.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& contents)
      : path_((std::filesystem::path(::testing::TempDir()) / name).string()) {
    std::ofstream(path_, std::ios::binary) << contents;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(WorkloadGenerator, SameSeedSameProblems) {
  EXPECT_EQ(generate_gsm8k_style(2026, 64), generate_gsm8k_style(2026, 64));
  EXPECT_NE(generate_gsm8k_style(2026, 8), generate_gsm8k_style(2027, 8));
}

TEST(WorkloadGenerator, PrefixStableInCount) {
  const std::vector<Problem> few = generate_gsm8k_style(7, 5);
  const std::vector<Problem> many = generate_gsm8k_style(7, 50);
  ASSERT_EQ(few.size(), 5u);
  EXPECT_TRUE(std::equal(few.begin(), few.end(), many.begin()));
  EXPECT_TRUE(generate_gsm8k_style(7, 0).empty());
}

// Every solution is "a op b = c." steps; recompute each step and check that the last result
// is the answer and that every value fits int32.
TEST(WorkloadGenerator, SolutionStepsRecomputeToAnswer) {
  const std::regex step(R"((\d+) ([-+*/]) (\d+) = (\d+)\.)");
  for (uint64_t seed : {0ull, 1ull, 2026ull, 0xffffffffffffffffull}) {
    for (const Problem& p : generate_gsm8k_style(seed, 500)) {
      SCOPED_TRACE(p.question + " | " + p.solution);
      int64_t last = -1;
      std::string rebuilt;
      for (auto it = std::sregex_iterator(p.solution.begin(), p.solution.end(), step);
           it != std::sregex_iterator(); ++it) {
        const int64_t a = std::stoll((*it)[1]), b = std::stoll((*it)[3]);
        const int64_t c = std::stoll((*it)[4]);
        const char op = (*it)[2].str()[0];
        switch (op) {
          case '+':
            EXPECT_EQ(a + b, c);
            break;
          case '-':
            EXPECT_EQ(a - b, c);
            break;
          case '*':
            EXPECT_EQ(a * b, c);
            break;
          case '/':
            ASSERT_NE(b, 0);
            EXPECT_EQ(a % b, 0);
            EXPECT_EQ(a / b, c);
            break;
        }
        EXPECT_LE(c, INT32_MAX);
        rebuilt += (rebuilt.empty() ? "" : " ") + it->str();
        last = c;
      }
      EXPECT_EQ(rebuilt, p.solution) << "solution is not only arithmetic steps";
      EXPECT_EQ(last, p.answer);
      EXPECT_GE(p.answer, 0);
      EXPECT_LE(p.answer, INT32_MAX);
    }
  }
}

TEST(WorkloadGenerator, PromptsAreShortAscii) {
  for (uint64_t seed : {0ull, 5ull, 2026ull}) {
    for (const Problem& p : generate_gsm8k_style(seed, 1000)) {
      const std::string prompt = p.prompt();
      EXPECT_GE(prompt.size(), 60u) << prompt;
      EXPECT_LE(prompt.size(), 120u) << prompt;
      for (char c : prompt) EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << prompt;
    }
  }
}

TEST(WorkloadGenerator, PromptAndReferenceLayout) {
  const Problem p{"Ava has 3 apples and buys 5 more. How many apples?", "3 + 5 = 8.", 8};
  EXPECT_EQ(p.prompt(), "Question: Ava has 3 apples and buys 5 more. How many apples?\nAnswer:");
  EXPECT_EQ(p.reference(),
            "Question: Ava has 3 apples and buys 5 more. How many apples?\nAnswer: 3 + 5 = 8. "
            "#### 8");
  EXPECT_EQ(p.reference().rfind(p.prompt(), 0), 0u);
}

TEST(WorkloadGenerator, ReferenceScoresAsCorrect) {
  for (const Problem& p : generate_gsm8k_style(2026, 200)) {
    EXPECT_EQ(extract_strict(p.reference()), p.answer) << p.reference();
    EXPECT_EQ(extract_flexible(p.reference()), p.answer) << p.reference();
  }
}

TEST(WorkloadTokenize, ByteValuesAndRoundTrip) {
  EXPECT_EQ(tokenize_bytes("A\n"), (std::vector<int32_t>{65, 10}));
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::vector<int32_t> ids = tokenize_bytes(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[static_cast<size_t>(b)], b);
  EXPECT_EQ(detokenize(ids), all);
  for (const Problem& p : generate_gsm8k_style(3, 20)) {
    EXPECT_EQ(detokenize(tokenize_bytes(p.reference())), p.reference());
  }
}

TEST(WorkloadTokenize, OutOfByteIdsRenderAsAngleBrackets) {
  const std::vector<int32_t> ids = {72, 300, 105, -1, 256};
  EXPECT_EQ(detokenize(ids), "H<300>i<-1><256>");
  EXPECT_EQ(detokenize({}), "");
}

TEST(WorkloadExtract, Strict) {
  EXPECT_EQ(extract_strict("so 3 + 5 = 8. #### 8"), 8);
  EXPECT_EQ(extract_strict("#### 1,234"), 1234);
  EXPECT_EQ(extract_strict("#### -5"), -5);
  EXPECT_EQ(extract_strict("####7."), 7);
  EXPECT_EQ(extract_strict("#### 1 then #### 2"), 2);
  EXPECT_EQ(extract_strict("#### 12 and 99"), 12);
  EXPECT_EQ(extract_strict("#### 9223372036854775807"), INT64_MAX);
  EXPECT_EQ(extract_strict("#### -9223372036854775808"), INT64_MIN);
  EXPECT_EQ(extract_strict("#### 9223372036854775808"), std::nullopt);
  EXPECT_EQ(extract_strict("the answer is 8"), std::nullopt);
  EXPECT_EQ(extract_strict("#### eight"), std::nullopt);
  EXPECT_EQ(extract_strict("#### 1 then ####"), std::nullopt);
  EXPECT_EQ(extract_strict(""), std::nullopt);
}

TEST(WorkloadExtract, Flexible) {
  EXPECT_EQ(extract_flexible("3 + 5 = 8."), 8);
  EXPECT_EQ(extract_flexible("I think 12, no 15 apples"), 15);
  EXPECT_EQ(extract_flexible("total 1,234 dollars"), 1234);
  EXPECT_EQ(extract_flexible("it drops to -7"), -7);
  EXPECT_EQ(extract_flexible("3, 5"), 5);
  EXPECT_EQ(extract_flexible("#### 42"), 42);
  EXPECT_EQ(extract_flexible("costs $40"), 40);
  EXPECT_EQ(extract_flexible("no number here"), std::nullopt);
  EXPECT_EQ(extract_flexible(""), std::nullopt);
  EXPECT_EQ(extract_flexible("99999999999999999999"), std::nullopt);
}

TEST(WorkloadFile, JsonRoundTrip) {
  const std::vector<Problem> problems = generate_gsm8k_style(11, 12);
  const nlohmann::json j = workload_to_json(11, problems);
  EXPECT_EQ(j["format"], "splitcheck.workload");
  EXPECT_EQ(j["format_version"], 1);
  EXPECT_EQ(j["generator"], "gsm8k-style");
  EXPECT_EQ(j["seed"], 11u);
  TempFile file("workload_round_trip.json", j.dump(2));
  const Result<std::vector<Problem>> loaded = load_workload(file.path());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ(loaded.value(), problems);
}

// The committed workload is exactly what the generator writes for seed 2026, n 32.
TEST(WorkloadFile, CommittedSeed2026MatchesGenerator) {
  const std::string path =
      std::string(SPLITCHECK_SOURCE_DIR) + "/scenarios/workloads/gsm8k_style_seed2026_n32.json";
  const std::string expected =
      workload_to_json(2026, generate_gsm8k_style(2026, 32)).dump(2) + "\n";
  EXPECT_EQ(read_file(path), expected) << path << " is stale; regenerate it";
  const Result<std::vector<Problem>> loaded = load_workload(path);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ(loaded.value(), generate_gsm8k_style(2026, 32));
}

// Runs load_workload on `contents` and returns its error message (empty when it loads).
std::string load_error(const std::string& name, const std::string& contents) {
  TempFile file(name, contents);
  const Result<std::vector<Problem>> loaded = load_workload(file.path());
  if (loaded.is_ok()) return "";
  EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(loaded.status().message().find(file.path()), std::string::npos)
      << loaded.status().message();
  return loaded.status().message();
}

std::string with_problem(const std::string& problem) {
  return R"({"format":"splitcheck.workload","format_version":1,"generator":"gsm8k-style",)"
         R"("seed":1,"problems":[{"question":"q","solution":"s","answer":1},)" +
         problem + "]}";
}

TEST(WorkloadFile, LoadErrorsNameFileAndPointer) {
  EXPECT_NE(load_error("wl_malformed.json", "{\"format\": ").find("malformed JSON"),
            std::string::npos);
  EXPECT_NE(load_error("wl_wrong_type.json",
                       with_problem(R"({"question":"q","solution":"s","answer":"3"})"))
                .find("/problems/1/answer: expected integer"),
            std::string::npos);
  EXPECT_NE(
      load_error("wl_float.json", with_problem(R"({"question":"q","solution":"s","answer":2.5})"))
          .find("/problems/1/answer: expected integer"),
      std::string::npos);
  EXPECT_NE(load_error("wl_missing.json", with_problem(R"({"question":"q","answer":3})"))
                .find("/problems/1/solution: missing"),
            std::string::npos);
  EXPECT_NE(load_error("wl_question_type.json",
                       with_problem(R"({"question":7,"solution":"s","answer":3})"))
                .find("/problems/1/question: expected string"),
            std::string::npos);
  EXPECT_NE(
      load_error("wl_not_object.json", with_problem("[]")).find("/problems/1: expected object"),
      std::string::npos);
  EXPECT_NE(
      load_error("wl_no_problems.json", R"({"format":"splitcheck.workload","format_version":1})")
          .find("/problems: missing"),
      std::string::npos);
  EXPECT_NE(load_error("wl_format.json", R"({"format":"other","format_version":1,"problems":[]})")
                .find("/format: expected"),
            std::string::npos);
  EXPECT_NE(load_error("wl_version.json",
                       R"({"format":"splitcheck.workload","format_version":2,"problems":[]})")
                .find("/format_version: unsupported"),
            std::string::npos);
  EXPECT_NE(load_error("wl_root.json", "[1, 2]").find("expected a JSON object at the root"),
            std::string::npos);
}

TEST(WorkloadFile, MissingFileIsInvalidInput) {
  const Result<std::vector<Problem>> loaded = load_workload("/nonexistent/workload.json");
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(loaded.status().message().find("/nonexistent/workload.json"), std::string::npos);
}

}  // namespace
}  // namespace splitcheck
