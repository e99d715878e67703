// Dumps whose storage no reader can read within bounds, made with h5py: a dataset in
// external storage at a FIFO, a virtual dataset whose source is that FIFO, an external link
// to it, a soft link, datasets through filters the format does not allow (lzf,
// scaleoffset), and a dump path that is itself a FIFO. `verify-dump` and `compare` refuse
// each before any data is read (exit 2, one line naming the file and the dataset), and a
// sweep whose engine writes one calls that case a corrupt dump (exit 3). Every command runs
// under a 2 s deadline (SIGTERM, then SIGKILL a second later) and must leave nothing
// reading the FIFO. The dumps are made once for the suite.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::expect_one_line_refusal;
using cli_test::file_text;
using cli_test::quote;
using cli_test::write_text;

// Writes dumps (argv: fifo, then mode out pairs) of kind `mode` at `out`: two datasets,
// input_ids and logits, with order and digest; every mode but "good" and "fletcher32"
// stores logits in a way the format refuses.
constexpr const char* kMakeDump = R"(import sys, h5py, numpy as np, xxhash
fifo = sys.argv[1]
def mark(d, order, data):
    d.attrs["order"] = np.int64(order)
    d.attrs["digest"] = np.bytes_(b"xxh3:%016x" % xxhash.xxh3_64(np.ascontiguousarray(data)).intdigest())
def make(mode, out):
  with h5py.File(out, "w", libver=("v108", "latest")) as f:
      f.attrs["format"] = np.bytes_(b"splitcheck.dump")
      f.attrs["format_version"] = np.int64(2)
      ids = np.arange(4, dtype="<i4")
      mark(f.create_dataset("forward/0/input_ids", data=ids), 0, ids)
      v = np.ones(1024, "<f4")
      if mode == "good":
          d = f.create_dataset("forward/0/logits", data=v)
      elif mode == "fletcher32":
          d = f.create_dataset("forward/0/logits", data=v, chunks=(256,), shuffle=True,
                               compression="gzip", fletcher32=True)
      elif mode == "external":
          d = f.create_dataset("forward/0/logits", shape=v.shape, dtype=v.dtype,
                               external=[(fifo, 0, 4096)])
      elif mode == "virtual":
          layout = h5py.VirtualLayout(shape=v.shape, dtype=v.dtype)
          layout[:] = h5py.VirtualSource(fifo, "x", shape=v.shape)
          d = f.create_virtual_dataset("forward/0/logits", layout)
      elif mode == "extlink":
          f["forward/0/logits"] = h5py.ExternalLink(fifo, "/x")
          d = None
      elif mode == "softlink":
          f["forward/0/logits"] = h5py.SoftLink("/forward/0/input_ids")
          d = None
      elif mode == "lzf":
          d = f.create_dataset("forward/0/logits", data=v, compression="lzf")
      elif mode == "scaleoffset":
          v = np.ones(1024, "<i4")
          d = f.create_dataset("forward/0/logits", data=v, scaleoffset=0)
      if d is not None:
          mark(d, 1, v)
for mode, out in zip(sys.argv[2::2], sys.argv[3::2]):
    make(mode, out)
)";

constexpr const char* kModes[] = {"good",    "fletcher32", "external", "virtual",
                                  "extlink", "softlink",   "lzf",      "scaleoffset"};

bool have_h5py() {
  static const bool ok =
      std::system("/usr/bin/python3 -c 'import h5py, numpy, xxhash' >/dev/null 2>&1") == 0;
  return ok;
}

class HostileStorageTest : public cli_test::CliFixture {
 protected:
  HostileStorageTest() : CliFixture("splitcheck-hostile-storage-") {}

  // The FIFO and one dump per mode, in a folder shared by the suite.
  static void SetUpTestSuite() {
    dumps_ = fs::temp_directory_path() /
             ("splitcheck-hostile-storage-dumps-" + std::to_string(::getpid()));
    fs::remove_all(dumps_);
    fs::create_directories(dumps_);
    if (!have_h5py()) return;
    ASSERT_EQ(::mkfifo(fifo().c_str(), 0600), 0);
    write_text(dumps_ / "make.py", kMakeDump);
    std::string cmd =
        "/usr/bin/python3 " + quote((dumps_ / "make.py").string()) + " " + quote(fifo().string());
    for (const char* m : kModes) cmd += std::string(" ") + m + " " + quote(dump(m).string());
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() { fs::remove_all(dumps_); }

  void SetUp() override {
    CliFixture::SetUp();
    if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 lacks h5py or xxhash (scripts/setup.sh)";
  }

  static fs::path fifo() { return dumps_ / "fifo"; }
  static fs::path dump(const std::string& mode) { return dumps_ / (mode + ".h5"); }

  // `splitcheck <args>` under the deadline: SIGTERM after 2 s (or `deadline_s`), SIGKILL 1 s
  // later (the
  // command then exits 124 or 137, never a refusal); the wall time in `seconds`.
  CliResult cli_within_deadline(const std::string& args, double& seconds,
                                int deadline_s = 2) const {
    const auto t0 = std::chrono::steady_clock::now();
    // exec: the deadline's signals reach splitcheck itself, and `timeout` returns only once
    // splitcheck has ended (not merely the shell).
    const std::string cmd = "exec " + quote(SPLITCHECK_BINARY) + " " + args + " >" +
                            quote(path("stdout.txt").string()) + " 2>" +
                            quote(path("stderr.txt").string());
    const int status = std::system(
        ("timeout -s TERM -k 1 " + std::to_string(deadline_s) + " sh -c " + quote(cmd)).c_str());
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, file_text(path("stdout.txt")),
            file_text(path("stderr.txt"))};
  }

  // verify-dump of `mode`'s dump, and compare of the good dump with it: each a
  // one-line refusal within the deadline naming the file and every needle; afterwards no
  // process has the FIFO open for reading (a writer's non-blocking open finds no reader).
  void expect_refused(const std::string& mode, std::initializer_list<std::string> needles) {
    const std::string bad = quote(dump(mode).string()), good = quote(dump("good").string());
    for (const std::string& args : {"verify-dump " + bad, "compare " + good + " " + bad}) {
      double seconds = 0;
      const CliResult r = cli_within_deadline(args, seconds);
      SCOPED_TRACE(args);
      expect_one_line_refusal(r, {dump(mode).string()});
      for (const std::string& n : needles)
        EXPECT_NE(r.err.find(n), std::string::npos) << n << " in: " << r.err;
      EXPECT_LT(seconds, 2.0);
      const int fd = ::open(fifo().c_str(), O_WRONLY | O_NONBLOCK);
      EXPECT_EQ(fd, -1) << "a process still reads the FIFO";
      EXPECT_EQ(errno, ENXIO);
      if (fd >= 0) ::close(fd);
    }
  }

  static fs::path dumps_;
};

fs::path HostileStorageTest::dumps_;

TEST_F(HostileStorageTest, SoundDumpsAreReadCompressedOrNot) {
  double seconds = 0;
  for (const char* mode : {"good", "fletcher32"}) {
    const CliResult v = cli_within_deadline("verify-dump " + quote(dump(mode).string()), seconds);
    EXPECT_EQ(v.code, 0) << mode << ": " << v.out << v.err;
  }
  const CliResult c = cli_within_deadline(
      "compare " + quote(dump("good").string()) + " " + quote(dump("fletcher32").string()),
      seconds);
  EXPECT_EQ(c.code, 0) << c.out << c.err;
}

TEST_F(HostileStorageTest, ExternalStorageAtAFifoIsRefusedBeforeAnyRead) {
  expect_refused("external", {"/forward/0/logits", "external storage", fifo().string()});
}

TEST_F(HostileStorageTest, AVirtualDatasetIsRefused) {
  expect_refused("virtual", {"/forward/0/logits", "virtual dataset"});
}

TEST_F(HostileStorageTest, ExternalAndSoftLinksAreRefused) {
  expect_refused("extlink", {"/forward/0/logits", "external link"});
  expect_refused("softlink", {"/forward/0/logits", "soft link"});
}

TEST_F(HostileStorageTest, FiltersOutsideTheFormatAreRefused) {
  expect_refused("lzf", {"/forward/0/logits", "filter 32000"});
  expect_refused("scaleoffset", {"/forward/0/logits", "filter 6"});
}

TEST_F(HostileStorageTest, ADumpPathThatIsAFifoIsRefused) {
  double seconds = 0;
  const CliResult r = cli_within_deadline("verify-dump " + quote(fifo().string()), seconds);
  expect_one_line_refusal(r, {fifo().string(), "not a regular file (a FIFO)"});
  EXPECT_LT(seconds, 2.0);
}

// An external engine (the dump script: PP=1's dump sound, split-4's logits at the FIFO):
// that case is a corrupt dump naming the dataset (exit 3, the runner's exit for a case in
// error), the report is written, and the sweep ends by itself (deadline 10 s: it starts two
// engines, each a Python with h5py).
TEST_F(HostileStorageTest, ASweepCallsAnEnginesDumpAtAFifoACorruptDump) {
  nlohmann::json j = nlohmann::json::parse(
      file_text(fs::path(SPLITCHECK_SOURCE_DIR) / "scenarios" / "external-self.json"));
  const fs::path engine = path("engine.sh");
  write_text(engine, "#!/bin/sh\nmode=good; [ \"$2\" = 4 ] && mode=external\nexec /usr/bin/python3 " +
                         quote((dumps_ / "make.py").string()) + " " +
                         quote(fifo().string()) + " $mode \"$3\"\n");
  fs::permissions(engine, fs::perms::owner_all);
  j["engine"]["command"] = {engine.string(), "{scenario}", "{cuts}", "{out}"};
  j["partitions"]["splits"] = {{4}};
  j.erase("expect");
  write_text(path("scenario.json"), j.dump(2));
  double seconds = 0;
  const CliResult r = cli_within_deadline("sweep " + quote(path("scenario.json").string()) +
                                              " --report " + quote(path("rep").string()),
                                          seconds, 10);
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_LT(seconds, 10.0);
  const nlohmann::json rep = nlohmann::json::parse(file_text(path("rep") / "report.json"));
  ASSERT_EQ(rep["cases"].size(), 1u);
  EXPECT_EQ(rep["cases"][0]["verdict"], "error");
  const std::string m = rep["cases"][0]["message"].get<std::string>();
  EXPECT_NE(m.find("corrupt dump"), std::string::npos) << m;
  EXPECT_NE(m.find("/forward/0/logits"), std::string::npos) << m;
  EXPECT_NE(m.find("external storage"), std::string::npos) << m;
  const int fd = ::open(fifo().c_str(), O_WRONLY | O_NONBLOCK);
  EXPECT_EQ(fd, -1) << "a process still reads the FIFO";
  if (fd >= 0) ::close(fd);
}

}  // namespace
}  // namespace splitcheck
