// The Python package (python/splitcheck_dump) writes dumps `splitcheck compare` reads:
// an identical pair compares equal, a one-bit change is found and named, the stored
// digests are the XXH64 the C++ side computes, and (where PyTorch is installed) a model
// recorded twice through forward hooks compares equal.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "harness/dump/digest.h"
#include "harness/dump/dump.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";

struct Output {
  int rc = -1;
  std::string text;
};

// Runs a shell command, capturing stdout and stderr.
Output run(const std::string& cmd) {
  Output out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.text.append(buf.data(), n);
  const int status = ::pclose(p);
  out.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

bool python_has(const std::string& module) {
  if (!fs::exists(kPython)) return false;
  return run(std::string(kPython) + " -c 'import " + module + "'").rc == 0;
}

class PythonAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!python_has("h5py") || !python_has("numpy")) GTEST_SKIP() << "h5py/numpy missing";
    dir_ = fs::temp_directory_path() /
           ("splitcheck_py_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Runs a Python script with python/ (the package) on the path; returns its output.
  Output python(const std::string& script) {
    const fs::path file = dir_ / "script.py";
    std::ofstream(file) << script;
    return run("PYTHONPATH=" + std::string(SPLITCHECK_SOURCE_DIR) + "/python " + kPython + " " +
               file.string());
  }

  Output compare(const fs::path& a, const fs::path& b) {
    return run(std::string(SPLITCHECK_BINARY) + " compare " + a.string() + " " + b.string());
  }

  fs::path dir_;
};

// Writes a dump of seeded arrays; `flip` flips the lowest bit of one bf16 element.
std::string numpy_dump_script(const fs::path& path, bool flip) {
  return "import numpy as np\n"
         "from splitcheck_dump import DumpWriter\n"
         "rng = np.random.default_rng(7)\n"
         "with DumpWriter('" +
         path.string() +
         "', partition='0-4', backend='numpy') as w:\n"
         "    w.set_attr('/forward/0', 'kind', 'prefill')\n"
         "    w.write('/forward/0/input_ids', np.arange(5, dtype=np.int32))\n"
         "    for l in range(4):\n"
         "        x = rng.standard_normal((5, 16)).astype(np.float32)\n"
         "        bits = __import__('splitcheck_dump').to_bf16_bits(x)\n"
         "        if " +
         std::string(flip ? "True" : "False") +
         " and l == 2:\n"
         "            bits[3, 9] ^= 1\n"
         "        w.write(f'/forward/0/layers/{l}/pre_attn', bits, dtype='bfloat16')\n"
         "        w.write(f'/forward/0/layers/{l}/mlp_out', x * 0.5, dtype='bfloat16')\n"
         "    w.write('/forward/0/logits', rng.standard_normal((5, 33)).astype(np.float32))\n"
         "    w.write('/forward/0/empty_tail', np.zeros(37, dtype=np.int32))\n";
}

TEST_F(PythonAdapterTest, IdenticalDumpsCompareEqualAndOneBitIsNamed) {
  const fs::path a = dir_ / "a.h5", b = dir_ / "b.h5", c = dir_ / "c.h5";
  for (const auto& [path, flip] : {std::pair{a, false}, std::pair{b, false}, std::pair{c, true}}) {
    Output o = python(numpy_dump_script(path, flip));
    ASSERT_EQ(o.rc, 0) << o.text;
  }
  Output same = compare(a, b);
  EXPECT_EQ(same.rc, 0) << same.text;
  EXPECT_NE(same.text.find("equal"), std::string::npos) << same.text;
  Output diff = compare(a, c);
  EXPECT_EQ(diff.rc, 1) << diff.text;
  EXPECT_NE(diff.text.find("layer 2 pre_attn"), std::string::npos) << diff.text;
}

TEST_F(PythonAdapterTest, StoredDigestsAreTheXxh3OfTheBytes) {
  const fs::path a = dir_ / "a.h5";
  Output o = python(numpy_dump_script(a, false));
  ASSERT_EQ(o.rc, 0) << o.text;
  Result<DumpReader> r = DumpReader::open(a.string());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->header().partition, "0-4");
  ASSERT_EQ(r->datasets().size(), 11u);
  for (size_t i = 0; i < r->datasets().size(); ++i) {
    const DatasetInfo d = r->datasets()[i];
    EXPECT_EQ(d.order, static_cast<int64_t>(i));
    Result<Tensor> t = r->read(d.path);
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    EXPECT_EQ(d.digest, dataset_digest_hex(std::span<const std::byte>(t->bytes(), t->nbytes())))
        << d.path;
  }
  EXPECT_EQ(r->datasets()[1].dtype, DType::kBF16);
}

TEST_F(PythonAdapterTest, TorchModelRecordedTwiceThroughHooksComparesEqual) {
  if (!python_has("torch")) GTEST_SKIP() << "PyTorch is not installed for " << kPython;
  const std::string script =
      "import sys, torch\n"
      "from splitcheck_dump import DumpWriter, record_forward_hooks\n"
      "torch.manual_seed(0)\n"
      "model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(),\n"
      "                            torch.nn.Linear(16, 16))\n"
      "x = torch.randn(4, 16)\n"
      "for path in sys.argv[1:]:\n"
      "    with DumpWriter(path, backend='torch') as w:\n"
      "        hooks = record_forward_hooks(model, w, 0)\n"
      "        with torch.no_grad():\n"
      "            y = model(x)\n"
      "        for h in hooks: h.remove()\n"
      "        w.write('/forward/0/output', y.numpy())\n";
  const fs::path file = dir_ / "torch_model.py";
  std::ofstream(file) << script;
  const fs::path a = dir_ / "ta.h5", b = dir_ / "tb.h5";
  Output o = run("PYTHONPATH=" + std::string(SPLITCHECK_SOURCE_DIR) + "/python " + kPython + " " +
                 file.string() + " " + a.string() + " " + b.string());
  ASSERT_EQ(o.rc, 0) << o.text;
  Output same = compare(a, b);
  EXPECT_EQ(same.rc, 0) << same.text;
  Result<DumpReader> r = DumpReader::open(a.string());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_NE(r->find("/forward/0/layers/1/pre_attn"), nullptr);
}

}  // namespace
}  // namespace splitcheck
