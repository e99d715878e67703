// What the tests that drive the real `splitcheck` binary share: shell quoting, text
// files, and a fixture with its own temporary directory that runs the CLI with stdout and
// stderr captured.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>

namespace splitcheck::cli_test {

namespace fs = std::filesystem;

// `s` as one single-quoted shell word.
inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

// A refusal: exit 2 and exactly one `splitcheck: error:` line on stderr naming every needle.
inline void expect_one_line_refusal(const CliResult& r,
                                    std::initializer_list<std::string> needles) {
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("splitcheck: error: ", 0), 0u) << r.err;
  for (const std::string& n : needles)
    EXPECT_NE(r.err.find(n), std::string::npos) << n << " in: " << r.err;
}

// A test with a fresh temporary directory named after `prefix` and the test.
class CliFixture : public ::testing::Test {
 protected:
  explicit CliFixture(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           (prefix_ + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path path(const std::string& name) const { return dir_ / name; }

  // Runs `splitcheck <args>` with stdout and stderr captured in files of the test dir.
  CliResult cli(const std::string& args) const {
    const fs::path out = dir_ / "stdout.txt";
    const fs::path err = dir_ / "stderr.txt";
    const std::string cmd = quote(SPLITCHECK_BINARY) + " " + args + " >" + quote(out.string()) +
                            " 2>" + quote(err.string());
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, file_text(out), file_text(err)};
  }

  fs::path dir_;

 private:
  std::string prefix_;
};

}  // namespace splitcheck::cli_test
