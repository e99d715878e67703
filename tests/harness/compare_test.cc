// The bitwise comparator: equal and unequal dumps, bit-level reporting, NaN, structural
// problems, streaming in small blocks, and agreement with h5diff.
#include "harness/dump/compare.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "harness/dump/dump.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;

using Entries = std::vector<std::pair<std::string, Tensor>>;

Tensor bf16_ramp(Shape shape) {
  Tensor t = Tensor::zeros(DType::kBF16, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<bf16>()[i] = to_bf16(static_cast<float>(i % 97) * 0.125f - 4.0f);
  return t;
}

Tensor f32_ramp(Shape shape) {
  Tensor t = Tensor::zeros(DType::kF32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i) * 0.5f - 7;
  return t;
}

Tensor i32_ramp(Shape shape) {
  Tensor t = Tensor::zeros(DType::kI32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>(i * 3);
  return t;
}

// A small dump's contents in execution order.
Entries base_entries() {
  return {{"/forward/0/input_ids", i32_ramp({8})},
          {"/forward/0/layers/12/pre_attn", bf16_ramp({8, 64})},
          {"/forward/0/layers/12/attn_out", bf16_ramp({8, 64})},
          {"/forward/0/bank", bf16_ramp({8, 3, 64})},
          {"/forward/0/logits", f32_ramp({8, 100})}};
}

Entries deep_copy(const Entries& e) {
  Entries out;
  for (const auto& [p, t] : e) out.emplace_back(p, t.clone());
  return out;
}

Tensor& at(Entries& e, const std::string& path) {
  for (auto& [p, t] : e)
    if (p == path) return t;
  throw std::out_of_range(path);
}

class CompareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("splitcheck_compare_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const Entries& entries, bool compress = false) {
    const std::string path = (dir_ / name).string();
    DumpHeader h;
    h.created = "2024-05-01T12:00:00Z";
    h.level = "full";
    Result<DumpWriter> w = DumpWriter::create(path, h, compress);
    EXPECT_TRUE(w.is_ok()) << w.status().message();
    for (const auto& [p, t] : entries) EXPECT_TRUE(w->write(p, t).is_ok()) << p;
    EXPECT_TRUE(w->finish().is_ok());
    return path;
  }

  CompareResult compare(const std::string& a, const std::string& b, CompareOptions o = {}) {
    Result<CompareResult> r = compare_dumps(a, b, o);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r.is_ok() ? std::move(r).value() : CompareResult{};
  }

  fs::path dir_;
};

TEST_F(CompareTest, IdenticalDumpsAreEqualWithAndWithoutDigests) {
  const std::string a = write("a.h5", base_entries());
  const std::string b = write("b.h5", base_entries());
  CompareResult read = compare(a, b);  // the default reads and verifies every byte
  EXPECT_TRUE(read.equal());
  EXPECT_EQ(read.datasets_compared, 5);
  EXPECT_EQ(read.bytes_read, 2 * (8 * 4 + 2 * 8 * 64 * 2 + 8 * 3 * 64 * 2 + 8 * 100 * 4));
  EXPECT_FALSE(read.digests_trusted);
  EXPECT_EQ(read.datasets_unverified, 0);
  EXPECT_EQ(verdict(read), "equal (5 datasets)");
  EXPECT_EQ(read.first_divergence(), nullptr);

  CompareOptions trust;
  trust.trust_digest = true;
  CompareResult trusted = compare(a, b, trust);
  EXPECT_TRUE(trusted.equal());
  EXPECT_EQ(trusted.bytes_read, 0);  // taken as equal on digests alone
  EXPECT_TRUE(trusted.digests_trusted);
  EXPECT_EQ(trusted.datasets_unverified, 5);
  EXPECT_EQ(verdict(trusted), "equal (5 datasets) on 5 unverified digests (--trust-digests)");
  EXPECT_NE(digests_line(trusted).find("not verified"), std::string::npos);
}

TEST_F(CompareTest, OneBitFlipIsReportedAtItsTokenAndChannel) {
  Entries eb = deep_copy(base_entries());
  Tensor& x = at(eb, "/forward/0/layers/12/pre_attn");
  const int64_t index = 3 * 64 + 41;
  const uint16_t before = x.data<bf16>()[index].bits;
  x.data<bf16>()[index].bits ^= 1;
  const std::string a = write("a.h5", base_entries());
  const std::string b = write("b.h5", eb);

  for (size_t chunk : {size_t{64} << 20, size_t{96}, size_t{16}}) {
    for (bool trust : {true, false}) {
      CompareOptions o;
      o.chunk_bytes = chunk;
      o.trust_digest = trust;
      CompareResult r = compare(a, b, o);
      ASSERT_EQ(r.diffs.size(), 1u) << "chunk " << chunk;
      const TensorDiff& d = r.diffs[0];
      EXPECT_EQ(d.path, "/forward/0/layers/12/pre_attn");
      EXPECT_EQ(d.dtype, "bfloat16");
      EXPECT_EQ(d.order, 1);
      EXPECT_EQ(d.mismatches, 1);
      EXPECT_EQ(d.first_index, index);
      EXPECT_EQ(d.first_row, 3);
      EXPECT_EQ(d.first_col, 41);
      EXPECT_EQ(d.first_a_bits, before);
      EXPECT_EQ(d.first_b_bits, before ^ 1u);
      EXPECT_EQ(d.max_ulp, 1);
      EXPECT_FALSE(d.digest_equal);
      EXPECT_FALSE(d.nan_mismatch);
      EXPECT_GT(d.cosine, 0.9999);
      EXPECT_FALSE(r.equal());
      EXPECT_EQ(r.first_divergence(), &r.diffs[0]);
    }
  }
}

// float16, an outside engine's own dtype: stored as IEEE half, read back bit for bit,
// converted exactly, and a 1-ULP difference named with its 4 hex digits and ULP distance.
TEST_F(CompareTest, Float16IsStoredAndComparedAsItsOwnBits) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0xfbff), -65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e01)));
  Tensor h = Tensor::zeros(DType::kF16, {4, 8});
  for (int64_t i = 0; i < h.numel(); ++i)
    h.data<uint16_t>()[i] = static_cast<uint16_t>(0x3c00 + i);
  Tensor g = h.clone();
  g.data<uint16_t>()[8 + 5] += 1;
  const std::string a = write("a.h5", {{"/forward/0/layers/3/attn_out", h}});
  const std::string b = write("b.h5", {{"/forward/0/layers/3/attn_out", g}});
  Result<DumpReader> ra = DumpReader::open(a);
  ASSERT_TRUE(ra.is_ok()) << ra.status().message();
  ASSERT_EQ(ra->datasets().size(), 1u);
  EXPECT_EQ(ra->datasets()[0].dtype, DType::kF16);
  Result<Tensor> back = ra->read("/forward/0/layers/3/attn_out");
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(std::memcmp(back->bytes(), h.bytes(), h.nbytes()), 0);
  for (size_t chunk : {size_t{64} << 20, size_t{16}}) {
    CompareOptions o;
    o.chunk_bytes = chunk;
    CompareResult r = compare(a, b, o);
    ASSERT_EQ(r.diffs.size(), 1u);
    EXPECT_EQ(r.diffs[0].dtype, "float16");
    EXPECT_EQ(r.diffs[0].max_ulp, 1);
    EXPECT_EQ(verdict(r), "forward 0 layer 3 attn_out token 1 channel 5: 0x3c0d != 0x3c0e");
  }
  EXPECT_TRUE(compare(a, a).equal());
}

// A dataset a writer narrowed names its source dtype; the comparison counts it as after
// rounding and says so, also when everything is equal.
TEST_F(CompareTest, NarrowedDatasetsAreComparedAfterRoundingAndSaySo) {
  auto narrowed = [&](const std::string& name) {
    const std::string path = (dir_ / name).string();
    DumpHeader hdr;
    hdr.created = "2024-05-01T12:00:00Z";
    Result<DumpWriter> w = DumpWriter::create(path, hdr);
    EXPECT_TRUE(w.is_ok());
    for (const auto& [p, t] : base_entries()) EXPECT_TRUE(w->write(p, t).is_ok()) << p;
    EXPECT_TRUE(w->set_attr("/forward/0/layers/12/attn_out", "source_dtype", "float32").is_ok());
    EXPECT_TRUE(w->finish().is_ok());
    return path;
  };
  const std::string a = narrowed("a.h5"), b = narrowed("b.h5");
  Result<DumpReader> r = DumpReader::open(a);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->find("/forward/0/layers/12/attn_out")->source_dtype, "float32");
  EXPECT_EQ(r->find("/forward/0/layers/12/pre_attn")->source_dtype, "");
  CompareResult c = compare(a, b);
  EXPECT_TRUE(c.equal());
  EXPECT_EQ(c.datasets_rounded, 1);
  EXPECT_EQ(verdict(c),
            "equal (5 datasets), 1 of them compared AFTER ROUNDING (narrowed by their writer, "
            "e.g. /forward/0/layers/12/attn_out: float32 stored as bfloat16): not the engine's "
            "own bits");
  EXPECT_NE(rounding_line(c).find("compared AFTER ROUNDING: 1 datasets"), std::string::npos);
  CompareResult plain = compare(write("p.h5", base_entries()), write("q.h5", base_entries()));
  EXPECT_EQ(plain.datasets_rounded, 0);
  EXPECT_EQ(rounding_line(plain), "");
}

TEST_F(CompareTest, CompressedAndPlainDumpsCompareByContent) {
  // Chunked + deflated datasets are read through HDF5; plain ones are mapped. Mixed pairs
  // must give the same answers.
  Entries eb = deep_copy(base_entries());
  at(eb, "/forward/0/logits").data<uint32_t>()[5 * 100 + 9] ^= 0x10;
  const std::string a = write("a.h5", base_entries());
  const std::string ac = write("ac.h5", base_entries(), /*compress=*/true);
  const std::string bc = write("bc.h5", eb, /*compress=*/true);
  CompareOptions full;
  full.trust_digest = false;
  for (size_t chunk : {size_t{64} << 20, size_t{200}}) {
    full.chunk_bytes = chunk;
    EXPECT_TRUE(compare(a, ac, full).equal());
    CompareResult r = compare(a, bc, full);
    ASSERT_EQ(r.diffs.size(), 1u);
    EXPECT_EQ(r.diffs[0].path, "/forward/0/logits");
    EXPECT_EQ(r.diffs[0].mismatches, 1);
    EXPECT_EQ(r.diffs[0].first_row, 5);
    EXPECT_EQ(r.diffs[0].first_col, 9);
  }
}

TEST_F(CompareTest, VerdictLinesReadLikeTheStyleGuide) {
  TensorDiff d;
  d.path = "/layers/12/pre_attn";
  d.dtype = "bfloat16";
  d.shape = {8, 64};
  d.first_index = 3 * 64 + 41;
  d.first_row = 3;
  d.first_col = 41;
  d.first_a_bits = 0x3f80;
  d.first_b_bits = 0x3f81;
  d.mismatches = 1;
  EXPECT_EQ(verdict_line(d), "layer 12 pre_attn token 3 channel 41: 0x3f80 != 0x3f81");
  d.path = "/forward/2/taps/1";
  d.dtype = "float32";
  d.first_a_bits = 0x3f800000;
  d.first_b_bits = 0x7fc00000;
  EXPECT_EQ(verdict_line(d), "forward 2 tap 1 token 3 channel 41: 0x3f800000 != 0x7fc00000");
  EXPECT_EQ(describe_site("/forward/0/layers/3/mlp_out"), "forward 0 layer 3 mlp_out");
  EXPECT_EQ(format_bits(DType::kBF16, 0x3f80), "0x3f80");
  EXPECT_EQ(format_bits(DType::kI32, 5), "0x00000005");
}

TEST_F(CompareTest, StatisticsOfKnownDifferences) {
  Tensor a = Tensor::zeros(DType::kF32, {2, 2});
  Tensor b = Tensor::zeros(DType::kF32, {2, 2});
  const float va[] = {1, 2, 3, 4}, vb[] = {1, 2, 3, -4};
  for (int i = 0; i < 4; ++i) {
    a.data<float>()[i] = va[i];
    b.data<float>()[i] = vb[i];
  }
  Result<CompareResult> r = compare_tensors("/t", a, b);
  ASSERT_TRUE(r.is_ok());
  ASSERT_EQ(r->diffs.size(), 1u);
  const TensorDiff& d = r->diffs[0];
  EXPECT_EQ(d.mismatches, 1);
  EXPECT_EQ(d.first_row, 1);
  EXPECT_EQ(d.first_col, 1);
  EXPECT_EQ(d.max_abs, 8);
  EXPECT_DOUBLE_EQ(d.cosine, (1 + 4 + 9 - 16) / 30.0);
  // 4 and -4 straddle zero: their ULP distance is twice 4's distance from +0.
  EXPECT_EQ(d.max_ulp, 2.0 * std::bit_cast<uint32_t>(4.0f));

  Tensor ia = i32_ramp({5}), ib = i32_ramp({5});
  ib.data<int32_t>()[2] += 7;
  Result<CompareResult> ri = compare_tensors("/ids", ia, ib);
  ASSERT_TRUE(ri.is_ok());
  ASSERT_EQ(ri->diffs.size(), 1u);
  EXPECT_EQ(ri->diffs[0].max_ulp, 7);
  EXPECT_EQ(ri->diffs[0].max_abs, 7);
  EXPECT_EQ(ri->diffs[0].first_row, 2);
}

TEST_F(CompareTest, InMemoryAndFileComparisonsAgree) {
  Entries eb = deep_copy(base_entries());
  Tensor& bank = at(eb, "/forward/0/bank");
  for (int64_t i = 100; i < bank.numel(); i += 37) bank.data<bf16>()[i].bits += 3;
  const std::string a = write("a.h5", base_entries());
  const std::string b = write("b.h5", eb);
  CompareOptions small;
  small.chunk_bytes = 100;  // blocks smaller than one [3, 64] row: splits along axis 1
  CompareResult files = compare(a, b, small);
  ASSERT_EQ(files.diffs.size(), 1u);
  Entries ea = base_entries();
  Result<CompareResult> mem = compare_tensors("/forward/0/bank", at(ea, "/forward/0/bank"), bank);
  ASSERT_TRUE(mem.is_ok());
  ASSERT_EQ(mem->diffs.size(), 1u);
  const TensorDiff &f = files.diffs[0], &m = mem->diffs[0];
  EXPECT_EQ(f.mismatches, m.mismatches);
  EXPECT_EQ(f.first_index, 100);
  EXPECT_EQ(m.first_index, 100);
  EXPECT_EQ(f.max_ulp, m.max_ulp);
  EXPECT_EQ(f.max_abs, m.max_abs);
  EXPECT_EQ(f.cosine, m.cosine);
  EXPECT_EQ(f.first_row, 0);
  EXPECT_EQ(f.first_col, 100 % 64);
  EXPECT_EQ(verdict_line(f).rfind("forward 0 bank token 0 row 1 channel 36: ", 0), 0u)
      << verdict_line(f);
}

Tensor f32_with(std::initializer_list<uint32_t> bits) {
  Tensor t = Tensor::zeros(DType::kF32, {1, static_cast<int64_t>(bits.size())});
  int i = 0;
  for (uint32_t b : bits) t.data<uint32_t>()[i++] = b;
  return t;
}

TEST_F(CompareTest, NanIsComparedByItsBits) {
  const uint32_t qnan = 0x7fc00000, other_nan = 0x7fc00001;
  Result<CompareResult> same =
      compare_tensors("/x", f32_with({0x3f800000, qnan}), f32_with({0x3f800000, qnan}));
  ASSERT_TRUE(same.is_ok());
  EXPECT_TRUE(same->equal());

  Result<CompareResult> payload =
      compare_tensors("/x", f32_with({0x3f800000, qnan}), f32_with({0x3f800000, other_nan}));
  ASSERT_TRUE(payload.is_ok());
  ASSERT_EQ(payload->diffs.size(), 1u);
  EXPECT_TRUE(payload->diffs[0].nan_mismatch);
  EXPECT_EQ(payload->diffs[0].first_col, 1);

  Result<CompareResult> value_vs_nan =
      compare_tensors("/x", f32_with({0x3f800000, 0x40000000}), f32_with({0x3f800000, qnan}));
  ASSERT_TRUE(value_vs_nan.is_ok());
  ASSERT_EQ(value_vs_nan->diffs.size(), 1u);
  EXPECT_TRUE(value_vs_nan->diffs[0].nan_mismatch);
  EXPECT_EQ(value_vs_nan->diffs[0].max_abs, 0);  // NaN pairs stay out of max_abs
  CompareOptions approx;
  approx.approximate = true;
  Result<CompareResult> approx_nan = compare_tensors("/x", f32_with({0x3f800000, 0x40000000}),
                                                     f32_with({0x3f800000, qnan}), approx);
  EXPECT_FALSE(approx_nan->equal());  // an unmatched NaN fails even the approximate lane

  Result<CompareResult> zeros =
      compare_tensors("/x", f32_with({0x00000000}), f32_with({0x80000000}));
  ASSERT_EQ(zeros->diffs.size(), 1u);  // +0 and -0: different bits, 0 ULP apart
  EXPECT_EQ(zeros->diffs[0].max_ulp, 0);
}

TEST_F(CompareTest, StructuralProblemsNameTheDataset) {
  Entries eb = deep_copy(base_entries());
  at(eb, "/forward/0/layers/12/attn_out") = bf16_ramp({8, 63});
  at(eb, "/forward/0/logits") = bf16_ramp({8, 100});
  eb.erase(eb.begin());  // input_ids only in A
  eb.emplace_back("/forward/0/extra", f32_ramp({2}));
  const std::string a = write("a.h5", base_entries());
  const std::string b = write("b.h5", eb);
  CompareResult r = compare(a, b);
  EXPECT_FALSE(r.equal());
  ASSERT_EQ(r.structural_errors.size(), 2u);
  EXPECT_EQ(r.structural_errors[0],
            "dataset /forward/0/layers/12/attn_out: shape [8, 64] in A, [8, 63] in B");
  EXPECT_EQ(r.structural_errors[1], "dataset /forward/0/logits: dtype float32 in A, bfloat16 in B");
  EXPECT_EQ(r.only_in_a, (std::vector<std::string>{"/forward/0/input_ids"}));
  EXPECT_EQ(r.only_in_b, (std::vector<std::string>{"/forward/0/extra"}));
  EXPECT_TRUE(r.diffs.empty());
  EXPECT_EQ(r.datasets_compared, 2);

  Result<CompareResult> mem = compare_tensors("/t", bf16_ramp({2, 3}), bf16_ramp({3, 2}));
  ASSERT_TRUE(mem.is_ok());
  EXPECT_EQ(mem->structural_errors.size(), 1u);
}

TEST_F(CompareTest, StopAtFirstIgnorePrefixesAndApproximateLane) {
  Entries eb = deep_copy(base_entries());
  at(eb, "/forward/0/layers/12/pre_attn").data<bf16>()[5].bits += 1;
  at(eb, "/forward/0/logits").data<float>()[7] = 1e9f;
  const std::string a = write("a.h5", base_entries());
  const std::string b = write("b.h5", eb);
  EXPECT_EQ(compare(a, b).diffs.size(), 2u);

  CompareOptions first;
  first.stop_at_first = true;
  CompareResult r = compare(a, b, first);
  ASSERT_EQ(r.diffs.size(), 1u);
  EXPECT_EQ(r.diffs[0].path, "/forward/0/layers/12/pre_attn");

  CompareOptions ignore;
  ignore.ignore_prefixes = {"/forward/0/logits", "/forward/0/layers/"};
  EXPECT_TRUE(compare(a, b, ignore).equal());

  CompareOptions approx;
  approx.approximate = true;
  CompareResult ar = compare(a, b, approx);
  ASSERT_EQ(ar.diffs.size(), 2u);
  EXPECT_TRUE(ar.diffs[0].within_tolerance);   // 1 bf16 ULP
  EXPECT_FALSE(ar.diffs[1].within_tolerance);  // cosine collapses
  EXPECT_EQ(ar.first_divergence(), &ar.diffs[1]);
}

TEST_F(CompareTest, UnreadableInputIsAnErrorNotADifference) {
  const std::string a = write("a.h5", base_entries());
  const std::string junk = (dir_ / "junk.h5").string();
  std::ofstream(junk) << "not hdf5";
  Result<CompareResult> r = compare_dumps(a, junk, {});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(r.status().message().find(junk), std::string::npos);
}

// ---- digests are claims: checked whenever the data is read ----

bool have_h5py() {
  static const bool ok =
      std::system("/usr/bin/python3 -c 'import h5py, numpy' >/dev/null 2>&1") == 0;
  return ok;
}

// Runs a Python snippet with `f` open read-write on `file` (h5py), as an external editor
// of a dump would.
void h5py_edit(const std::string& file, const std::string& body) {
  const fs::path script = fs::path(file).replace_extension(".edit.py");
  std::ofstream(script) << "import sys, h5py, numpy as np\n"
                           "with h5py.File(sys.argv[1], 'r+') as f:\n"
                        << body;
  const std::string cmd = "/usr/bin/python3 " + script.string() + " " + file;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << body;
}

// One element of /forward/0/logits changed in place; its digest attribute left as it was.
constexpr const char* kMutateLogits =
    "    d = f['/forward/0/logits']\n"
    "    v = d[...]\n"
    "    v[5, 9] += 1\n"
    "    d[...] = v\n";

// Only the digest attribute of /forward/0/logits rewritten (the bytes are untouched).
constexpr const char* kForgeLogitsDigest =
    "    d = f['/forward/0/logits']\n"
    "    d.attrs.modify('digest', b'xxh3:0123456789abcdef')\n";

void expect_corrupt(const Result<CompareResult>& r, const std::string& file,
                    const std::string& dataset) {
  ASSERT_FALSE(r.is_ok()) << "expected a refusal, got: " << verdict(r.value());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(r.status().message().find(file), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(dataset), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("digest"), std::string::npos) << r.status().message();
}

TEST_F(CompareTest, MutatedDataUnderAStaleDigestIsACorruptFile) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 cannot import h5py";
  const std::string a = write("a.h5", base_entries());
  const std::string b = write("b.h5", base_entries());
  const std::string bc = write("bc.h5", base_entries(), /*compress=*/true);
  h5py_edit(b, kMutateLogits);
  h5py_edit(bc, kMutateLogits);
  for (size_t chunk : {size_t{64} << 20, size_t{200}}) {
    CompareOptions o;
    o.chunk_bytes = chunk;
    expect_corrupt(compare_dumps(a, b, o), b, "/forward/0/logits");
    expect_corrupt(compare_dumps(b, a, o), b, "/forward/0/logits");    // either side
    expect_corrupt(compare_dumps(a, bc, o), bc, "/forward/0/logits");  // read, not mapped
    o.stop_at_first = true;
    expect_corrupt(compare_dumps(a, b, o), b, "/forward/0/logits");
  }
  // A whole read checks the digest too.
  Result<DumpReader> r = DumpReader::open(b);
  ASSERT_TRUE(r.is_ok());
  Result<Tensor> t = r->read("/forward/0/logits");
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find(b), std::string::npos);
  EXPECT_TRUE(r->read("/forward/0/input_ids").is_ok());
}

TEST_F(CompareTest, AForgedDigestOverEqualBytesIsACorruptFile) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 cannot import h5py";
  const std::string a = write("a.h5", base_entries());
  const std::string b = write("b.h5", base_entries());
  h5py_edit(b, kForgeLogitsDigest);
  expect_corrupt(compare_dumps(a, b, {}), b, "/forward/0/logits");
  // Trusting digests does not help a forged one: they differ, so the bytes are read and
  // checked.
  CompareOptions trust;
  trust.trust_digest = true;
  expect_corrupt(compare_dumps(a, b, trust), b, "/forward/0/logits");
  // A digest that is not "xxh3:" and 16 hex digits is refused on open.
  h5py_edit(b, "    f['/forward/0/logits'].attrs['digest'] = np.bytes_(b'sha1:abc')\n");
  Result<CompareResult> r = compare_dumps(a, b, {});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("/forward/0/logits"), std::string::npos);
}

TEST_F(CompareTest, EachFormatVersionCarriesItsOwnDigestAlgorithm) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 cannot import h5py";
  const std::string a = write("a.h5", base_entries());
  Result<DumpReader> ra = DumpReader::open(a);
  ASSERT_TRUE(ra.is_ok());
  EXPECT_EQ(ra->header().format_version, 2);
  for (const DatasetInfo& d : ra->datasets()) EXPECT_TRUE(d.digest.starts_with("xxh3:")) << d.path;
  // The true XXH64 of the bytes, in a version 2 file: refused, naming what is expected.
  const std::string b = write("b.h5", base_entries());
  h5py_edit(b,
            "    import xxhash\n"
            "    d = f['/forward/0/logits']\n"
            "    d.attrs.modify('digest', ('xxh64:%016x' % "
            "xxhash.xxh64_intdigest(d[...].astype('<f4').tobytes())).encode())\n");
  Result<CompareResult> r = compare_dumps(a, b, {});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("/forward/0/logits"), std::string::npos);
  EXPECT_NE(r.status().message().find("not \"xxh3:\""), std::string::npos) << r.status().message();
  // Version 1 with the xxh3 digests of version 2: refused too.
  const std::string c = write("c.h5", base_entries());
  h5py_edit(c, "    f.attrs['format_version'] = np.int64(1)\n");
  r = compare_dumps(a, c, {});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("not \"xxh64:\""), std::string::npos) << r.status().message();
}

// The committed golden is a version 1 dump (XXH64 digests): it is still read, every digest
// checked, and a flipped byte in it is still a corrupt file.
TEST_F(CompareTest, Version1DumpsAreReadAndTheirXxh64DigestsChecked) {
  const std::string golden = std::string(SPLITCHECK_SOURCE_DIR) + "/golden/default.h5";
  Result<DumpReader> r = DumpReader::open(golden);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->header().format_version, 1);
  ASSERT_FALSE(r->datasets().empty());
  for (const DatasetInfo& d : r->datasets()) EXPECT_TRUE(d.digest.starts_with("xxh64:")) << d.path;
  for (int threads : {1, 3}) {
    CompareOptions o;
    o.threads = threads;
    CompareResult same = compare(golden, golden, o);
    EXPECT_TRUE(same.equal()) << verdict(same);
    EXPECT_GT(same.bytes_read, 0);
  }
  // One byte of the last dataset stored contiguously flipped in a copy.
  const std::string copy = (dir_ / "golden-copy.h5").string();
  fs::copy_file(golden, copy);
  std::string victim;
  std::optional<uint64_t> offset;
  for (const DatasetInfo& d : r->datasets())
    if (d.nbytes > 0)
      if (std::optional<uint64_t> o = r->contiguous_offset(d.path)) victim = d.path, offset = o;
  ASSERT_TRUE(offset.has_value());
  {
    std::fstream f(copy, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(*offset));
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 1);
    f.seekp(static_cast<std::streamoff>(*offset));
    f.write(&byte, 1);
  }
  Result<CompareResult> bad = compare_dumps(golden, copy, {});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find(victim), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("stored digest xxh64:"), std::string::npos)
      << bad.status().message();
}

// Datasets stored contiguously are read, hashed and compared by several threads; what
// they find is reported as one thread would report it, in execution order.
TEST_F(CompareTest, ParallelPassReportsAsOneThreadDoes) {
  Entries ea, eb;
  for (int l = 0; l < 12; ++l) {
    const std::string path = "/forward/0/layers/" + std::to_string(l) + "/pre_attn";
    ea.emplace_back(path, bf16_ramp({16, 256}));
    eb.emplace_back(path, bf16_ramp({16, 256}));
  }
  eb[3].second.data<bf16>()[100].bits ^= 1;
  eb[9].second.data<bf16>()[7].bits ^= 0x10;
  const std::string a = write("a.h5", ea), b = write("b.h5", eb);
  CompareOptions one;
  one.threads = 1;
  const CompareResult serial = compare(a, b, one);
  ASSERT_EQ(serial.diffs.size(), 2u);
  for (int threads : {2, 4, 12, 0}) {
    SCOPED_TRACE(threads);
    CompareOptions o;
    o.threads = threads;
    o.chunk_bytes = 3000;  // several windows per dataset and thread
    const CompareResult par = compare(a, b, o);
    ASSERT_EQ(par.diffs.size(), 2u);
    EXPECT_EQ(par.diffs[0].path, "/forward/0/layers/3/pre_attn");
    EXPECT_EQ(par.diffs[1].path, "/forward/0/layers/9/pre_attn");
    EXPECT_EQ(par.diffs[1].mismatches, serial.diffs[1].mismatches);
    EXPECT_EQ(verdict_line(par.diffs[0]), verdict_line(serial.diffs[0]));
    EXPECT_EQ(par.bytes_read, serial.bytes_read);
    EXPECT_EQ(par.datasets_compared, 12);
    o.stop_at_first = true;
    const CompareResult first = compare(a, b, o);
    ASSERT_EQ(first.diffs.size(), 1u);
    EXPECT_EQ(first.diffs[0].path, "/forward/0/layers/3/pre_attn");
    EXPECT_EQ(first.datasets_compared, 4);
  }
}

TEST_F(CompareTest, ParallelPassFindsACorruptDatasetLateInTheFile) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 cannot import h5py";
  Entries e;
  for (int l = 0; l < 10; ++l)
    e.emplace_back("/forward/0/layers/" + std::to_string(l) + "/pre_attn", bf16_ramp({8, 128}));
  const std::string a = write("a.h5", e), b = write("b.h5", e);
  h5py_edit(b,
            "    d = f['/forward/0/layers/8/pre_attn']\n"
            "    v = d[...]\n"
            "    v[1, 2] ^= 1\n"
            "    d[...] = v\n");
  for (int threads : {1, 4}) {
    CompareOptions o;
    o.threads = threads;
    expect_corrupt(compare_dumps(a, b, o), b, "/forward/0/layers/8/pre_attn");
  }
}

TEST_F(CompareTest, TrustingDigestsSkipsTheMutationAndSaysSo) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 cannot import h5py";
  const std::string a = write("a.h5", base_entries());
  const std::string b = write("b.h5", base_entries());
  h5py_edit(b, kMutateLogits);
  CompareOptions trust;
  trust.trust_digest = true;
  CompareResult r = compare(a, b, trust);
  EXPECT_TRUE(r.equal());  // what the user opted into: an unverified verdict...
  EXPECT_TRUE(r.digests_trusted);
  EXPECT_EQ(r.datasets_unverified, 5);
  EXPECT_NE(verdict(r).find("unverified"), std::string::npos);  // ...that says so
}

TEST_F(CompareTest, AttributesThatCarryResultsAreCompared) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 cannot import h5py";
  const std::string base = write("base.h5", base_entries());
  {
    // The writer's own group attributes: forward kind and positions, /spec figures.
    for (const std::string& p : {base}) {
      h5py_edit(p,
                "    f['/forward/0'].attrs['kind'] = np.bytes_(b'prefill')\n"
                "    f['/forward/0'].attrs['first_position'] = np.int64(0)\n"
                "    f['/forward/0'].attrs['last_position'] = np.int64(7)\n"
                "    g = f.require_group('/spec')\n"
                "    g.attrs['mean_accepted'] = 0.375\n"
                "    g.attrs['steps'] = np.int64(16)\n"
                "    f.attrs['model_sha256'] = np.bytes_(b'a' * 64)\n");
    }
  }
  struct Case {
    std::string name, edit, object, attribute;
  };
  const std::vector<Case> cases = {
      {"kind", "    f['/forward/0'].attrs['kind'] = np.bytes_(b'decode')\n", "/forward/0", "kind"},
      {"position", "    f['/forward/0'].attrs['last_position'] = np.int64(8)\n", "/forward/0",
       "last_position"},
      {"spec_figure", "    f['/spec'].attrs['mean_accepted'] = 0.5\n", "/spec", "mean_accepted"},
      {"spec_type", "    f['/spec'].attrs['steps'] = 16.0\n", "/spec", "steps"},
      {"spec_extra", "    f['/spec'].attrs['new_figure'] = np.int64(1)\n", "/spec", "new_figure"},
      {"model", "    f.attrs['model_sha256'] = np.bytes_(b'b' * 64)\n", "/", "model_sha256"},
      {"dataset_attr", "    f['/forward/0/bank'].attrs['note'] = np.bytes_(b'x')\n",
       "/forward/0/bank", "note"},
      {"volatile_list",
       "    f.attrs['volatile'] = np.bytes_(b'created,partition,producer,env,model_sha256')\n", "/",
       "volatile"},
  };
  for (const Case& c : cases) {
    const std::string b = (dir_ / (c.name + ".h5")).string();
    fs::copy_file(base, b, fs::copy_options::overwrite_existing);
    h5py_edit(b, c.edit);
    CompareResult r = compare(base, b);
    EXPECT_FALSE(r.equal()) << c.name;
    EXPECT_TRUE(r.diffs.empty()) << c.name;  // the datasets are equal
    ASSERT_EQ(r.attribute_diffs.size(), 1u) << c.name << ": " << verdict(r);
    EXPECT_EQ(r.attribute_diffs[0].object, c.object) << c.name;
    EXPECT_EQ(r.attribute_diffs[0].name, c.attribute) << c.name;
    EXPECT_NE(verdict(r).find(c.object), std::string::npos) << verdict(r);
    EXPECT_NE(verdict(r).find(c.attribute), std::string::npos) << verdict(r);
  }
  // Volatile root attributes, the scenario text, and ignored prefixes are not compared.
  const std::string v = (dir_ / "volatile.h5").string();
  fs::copy_file(base, v, fs::copy_options::overwrite_existing);
  h5py_edit(v,
            "    f.attrs['created'] = np.bytes_(b'2031-01-01T00:00:00Z')\n"
            "    f.attrs['producer'] = np.bytes_(b'{}')\n"
            "    f.attrs['scenario'] = np.bytes_(b'{\"workload\": \"/elsewhere\"}')\n");
  EXPECT_TRUE(compare(base, v).equal()) << verdict(compare(base, v));
  const std::string ignored = (dir_ / "ignored.h5").string();
  fs::copy_file(base, ignored, fs::copy_options::overwrite_existing);
  h5py_edit(ignored, "    f.require_group('/stages/0').attrs['embedding'] = np.bytes_(b'x')\n");
  CompareOptions o;
  o.ignore_prefixes = {"/stages"};
  EXPECT_TRUE(compare(base, ignored, o).equal());
  EXPECT_FALSE(compare(base, ignored).equal());
}

// compare --approximate: a NaN or an infinity that the other side does not match bit for
// bit is a divergence, whatever the ULP distance (bf16 inf is 1 ULP from the largest
// finite value; float32 has no ULP bound) or the cosine (over finite pairs) say.
TEST_F(CompareTest, ApproximateLaneNeverToleratesAnUnmatchedNonFiniteValue) {
  auto bf16_with = [](std::initializer_list<uint16_t> bits) {
    Tensor t = Tensor::zeros(DType::kBF16, {1, static_cast<int64_t>(bits.size())});
    int i = 0;
    for (uint16_t b : bits) t.data<bf16>()[i++].bits = b;
    return t;
  };
  const uint32_t one = 0x3f800000, two = 0x40000000, three = 0x40400000;
  const uint32_t inf = 0x7f800000, neg_inf = 0xff800000, qnan = 0x7fc00000;
  struct Case {
    std::string name;
    Tensor a, b;
  };
  std::vector<Case> cases;
  cases.push_back({"f32_inf_vs_number", f32_with({one, two, three}), f32_with({one, two, inf})});
  cases.push_back(
      {"f32_number_vs_neg_inf", f32_with({one, two, neg_inf}), f32_with({one, two, three})});
  cases.push_back({"f32_inf_vs_neg_inf", f32_with({one, two, inf}), f32_with({one, two, neg_inf})});
  cases.push_back({"f32_nan_vs_number", f32_with({one, two, three}), f32_with({one, two, qnan})});
  cases.push_back({"bf16_inf_vs_largest_finite", bf16_with({0x3f80, 0x4000, 0x7f80}),
                   bf16_with({0x3f80, 0x4000, 0x7f7f})});
  cases.push_back({"bf16_neg_inf_vs_inf", bf16_with({0x3f80, 0x4000, 0xff80}),
                   bf16_with({0x3f80, 0x4000, 0x7f80})});
  CompareOptions approx;
  approx.approximate = true;
  for (const Case& c : cases) {
    const std::string a = write(c.name + "_a.h5", {{"/forward/0/logits", c.a}});
    const std::string b = write(c.name + "_b.h5", {{"/forward/0/logits", c.b}});
    CompareResult r = compare(a, b, approx);
    ASSERT_EQ(r.diffs.size(), 1u) << c.name;
    EXPECT_TRUE(r.diffs[0].non_finite_mismatch) << c.name;
    EXPECT_FALSE(r.diffs[0].within_tolerance) << c.name;
    EXPECT_FALSE(r.equal()) << c.name;
    EXPECT_EQ(r.first_divergence(), &r.diffs[0]) << c.name;
    EXPECT_NE(verdict(r).find("forward 0 logits"), std::string::npos) << verdict(r);
    // The same from the other side, and in memory.
    EXPECT_FALSE(compare(b, a, approx).equal()) << c.name;
    Result<CompareResult> m = compare_tensors("/x", c.a, c.b, approx);
    ASSERT_TRUE(m.is_ok());
    EXPECT_FALSE(m->equal()) << c.name;
  }
  // Infinities matched bit for bit leave the lane as it was: a 1-ULP bf16 difference beside
  // them is within tolerance.
  CompareResult matched =
      compare(write("m_a.h5", {{"/t", bf16_with({0x3f80, 0x7f80, 0xff80})}}),
              write("m_b.h5", {{"/t", bf16_with({0x3f81, 0x7f80, 0xff80})}}), approx);
  ASSERT_EQ(matched.diffs.size(), 1u);
  EXPECT_FALSE(matched.diffs[0].non_finite_mismatch);
  EXPECT_TRUE(matched.diffs[0].within_tolerance);
  EXPECT_TRUE(matched.equal());
}

// The `volatile` list comes from the reference (A) alone and never exempts itself: a
// candidate cannot hide a model_sha256 difference by listing it (or `volatile`) in its own
// list.
TEST_F(CompareTest, OnlyTheReferenceSaysWhatIsVolatile) {
  auto dump = [&](const std::string& name, const std::string& model, const std::string& vol) {
    const std::string path = (dir_ / name).string();
    DumpHeader h;
    h.created = "2024-05-01T12:00:00Z";
    h.level = "full";
    h.model_sha256 = model;
    h.volatile_attrs = vol;
    Result<DumpWriter> w = DumpWriter::create(path, h);
    EXPECT_TRUE(w.is_ok()) << w.status().message();
    for (const auto& [p, t] : base_entries()) EXPECT_TRUE(w->write(p, t).is_ok()) << p;
    EXPECT_TRUE(w->finish().is_ok());
    return path;
  };
  const std::string kDefault = "created,partition,producer,env";
  const std::string golden = dump("golden.h5", std::string(64, 'a'), kDefault);
  const std::string hiding =
      dump("hiding.h5", std::string(64, 'b'), kDefault + ",model_sha256,volatile");
  CompareResult r = compare(golden, hiding);
  EXPECT_FALSE(r.equal());
  std::set<std::string> names;
  for (const AttributeDiff& d : r.attribute_diffs) names.insert(d.name);
  EXPECT_EQ(names, (std::set<std::string>{"model_sha256", "volatile"})) << verdict(r);
  // Taken as the reference, the same file's list is its own to give: model_sha256 is
  // exempt, and the lists still differ.
  CompareResult reversed = compare(hiding, golden);
  EXPECT_FALSE(reversed.equal());
  ASSERT_EQ(reversed.attribute_diffs.size(), 1u) << verdict(reversed);
  EXPECT_EQ(reversed.attribute_diffs[0].name, "volatile");
  // Even a reference that lists `volatile` compares it.
  const std::string self_listing = dump("self.h5", std::string(64, 'a'), kDefault + ",volatile");
  CompareResult s = compare(self_listing, golden);
  ASSERT_EQ(s.attribute_diffs.size(), 1u) << verdict(s);
  EXPECT_EQ(s.attribute_diffs[0].name, "volatile");
  // What the reference lists is skipped: its own model_sha256 exemption holds.
  const std::string exempt = dump("exempt.h5", std::string(64, 'a'), kDefault + ",model_sha256");
  const std::string other_model = dump("other.h5", std::string(64, 'c'), kDefault);
  CompareResult e = compare(exempt, other_model);
  ASSERT_EQ(e.attribute_diffs.size(), 1u) << verdict(e);
  EXPECT_EQ(e.attribute_diffs[0].name, "volatile");
}

// ---- agreement with h5diff ----

struct H5diffOutcome {
  int exit_status = -1;
  std::set<std::string> differing;  // dataset paths with a nonzero difference count
};

H5diffOutcome run_h5diff(const std::string& flags, const std::string& a, const std::string& b,
                         const std::string& out) {
  H5diffOutcome o;
  const std::string cmd = "/usr/bin/h5diff -r " + flags + " " + a + " " + b + " > " + out + " 2>&1";
  int rc = std::system(cmd.c_str());
  o.exit_status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  std::ifstream in(out);
  std::string line, current;
  const std::regex dataset_line(R"(^dataset: <(.*)> and <.*>$)");
  const std::regex attribute_line(R"(^attribute: <.*)");
  const std::regex found(R"(^(\d+) differences? found$)");
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, dataset_line)) {
      current = m[1];
    } else if (std::regex_match(line, attribute_line)) {
      current.clear();  // attribute differences (digest) follow their dataset's
    } else if (std::regex_match(line, m, found) && !current.empty() && std::stoll(m[1]) > 0) {
      o.differing.insert(current);
    }
  }
  return o;
}

std::set<std::string> differing_paths(const CompareResult& r) {
  std::set<std::string> s;
  for (const TensorDiff& d : r.diffs) s.insert(d.path);
  return s;
}

TEST_F(CompareTest, AgreesWithH5diff) {
  if (!fs::exists("/usr/bin/h5diff")) GTEST_SKIP() << "/usr/bin/h5diff is absent";
  const Entries base = base_entries();
  std::map<std::string, Entries> cases;
  cases["equal"] = deep_copy(base);
  {
    Entries e = deep_copy(base);
    at(e, "/forward/0/layers/12/pre_attn").data<bf16>()[3 * 64 + 41].bits ^= 1;
    cases["one_bit"] = std::move(e);
  }
  {
    Entries e = deep_copy(base);
    at(e, "/forward/0/input_ids").data<int32_t>()[7] = -1;
    at(e, "/forward/0/bank").data<bf16>()[1000].bits ^= 0x8000;
    at(e, "/forward/0/logits").data<float>()[0] = 123.0f;
    at(e, "/forward/0/logits").data<float>()[799] = -0.5f;
    cases["several"] = std::move(e);
  }
  // NaN with the same bits on both sides: A needs the NaN too, so these pairs use their
  // own A (see below).
  const std::string a = write("a.h5", base);
  for (const auto& [name, entries] : cases) {
    const std::string b = write(name + ".h5", entries);
    CompareOptions full;
    full.trust_digest = false;
    CompareResult ours = compare(a, b, full);
    for (const char* flags : {"", "-N"}) {
      H5diffOutcome h = run_h5diff(flags, a, b, (dir_ / (name + ".out")).string());
      EXPECT_EQ(h.exit_status, ours.equal() ? 0 : 1) << name << " " << flags;
      EXPECT_EQ(h.differing, differing_paths(ours)) << name << " " << flags;
    }
  }

  // NaN pairs. Same bits: equal for us and for h5diff with and without -N. Different
  // payloads: a mismatch for us and for `h5diff -N`; plain h5diff calls two NaNs equal.
  Entries nan_a = deep_copy(base), same_nan = deep_copy(base), other_nan = deep_copy(base);
  at(nan_a, "/forward/0/logits").data<uint32_t>()[10] = 0x7fc00000;
  at(same_nan, "/forward/0/logits").data<uint32_t>()[10] = 0x7fc00000;
  at(other_nan, "/forward/0/logits").data<uint32_t>()[10] = 0xffc00001;
  const std::string na = write("nan_a.h5", nan_a);
  const std::string ns = write("nan_same.h5", same_nan);
  const std::string no = write("nan_other.h5", other_nan);
  CompareOptions full;
  full.trust_digest = false;
  CompareResult same = compare(na, ns, full);
  EXPECT_TRUE(same.equal());
  for (const char* flags : {"", "-N"}) {
    H5diffOutcome h = run_h5diff(flags, na, ns, (dir_ / "nan_same.out").string());
    EXPECT_EQ(h.exit_status, 0) << flags;
    EXPECT_TRUE(h.differing.empty()) << flags;
  }
  CompareResult other = compare(na, no, full);
  ASSERT_EQ(other.diffs.size(), 1u);
  EXPECT_TRUE(other.diffs[0].nan_mismatch);
  H5diffOutcome strict = run_h5diff("-N", na, no, (dir_ / "nan_other_n.out").string());
  EXPECT_EQ(strict.exit_status, 1);
  EXPECT_EQ(strict.differing, differing_paths(other));
  H5diffOutcome lenient = run_h5diff("", na, no, (dir_ / "nan_other.out").string());
  EXPECT_TRUE(lenient.differing.empty()) << "h5diff's default NaN rule changed: revisit "
                                            "the comment at the top of harness/dump/compare.h";
}

TEST_F(CompareTest, CorruptAndAttributeOnlyPairsAgainstH5diff) {
  if (!fs::exists("/usr/bin/h5diff")) GTEST_SKIP() << "/usr/bin/h5diff is absent";
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 cannot import h5py";
  // h5diff 1.10 cannot compare string attributes of different fixed sizes (it exits 2),
  // so the edits below keep each attribute's type (attrs.modify, equal lengths).
  const std::string a = write("a.h5", base_entries());
  h5py_edit(a, "    f['/forward/0'].attrs['kind'] = np.bytes_(b'decode')\n");
  auto edited = [&](const std::string& name, const std::string& edit) {
    const std::string p = (dir_ / name).string();
    fs::copy_file(a, p, fs::copy_options::overwrite_existing);
    h5py_edit(p, edit);
    return p;
  };
  // Mutated data under a stale digest: h5diff sees the data (and nothing else) differ;
  // we refuse the file as corrupt, naming it and the dataset: never "equal".
  const std::string mutated = edited("mutated.h5", kMutateLogits);
  H5diffOutcome h = run_h5diff("", a, mutated, (dir_ / "mutated.out").string());
  EXPECT_EQ(h.exit_status, 1);
  EXPECT_EQ(h.differing, std::set<std::string>{"/forward/0/logits"});
  expect_corrupt(compare_dumps(a, mutated, {}), mutated, "/forward/0/logits");

  // The same edit with its digest rewritten honestly: both say "differ", same dataset.
  const std::string honest = edited(
      "honest.h5", std::string(kMutateLogits) +
                       "    import xxhash\n"
                       "    d.attrs.modify('digest', ('xxh3:%016x' % "
                       "xxhash.xxh3_64_intdigest(d[...].astype('<f4').tobytes())).encode())\n");
  h = run_h5diff("", a, honest, (dir_ / "honest.out").string());
  CompareResult ours = compare(a, honest);
  EXPECT_EQ(h.exit_status, 1);
  EXPECT_FALSE(ours.equal());
  EXPECT_EQ(h.differing, differing_paths(ours));

  // Only the digest attribute changed: for h5diff an attribute difference (exit 1); for
  // us the stored claim is checked against the bytes, so the forging file is named
  // (exit 2), which says more than "differ": which file lies.
  const std::string forged = edited("forged.h5", kForgeLogitsDigest);
  h = run_h5diff("", a, forged, (dir_ / "forged.out").string());
  EXPECT_EQ(h.exit_status, 1);
  EXPECT_TRUE(h.differing.empty());
  expect_corrupt(compare_dumps(a, forged, {}), forged, "/forward/0/logits");

  // An attribute-only difference: both say "differ" (exit 1).
  const std::string attr =
      edited("attr.h5", "    f['/forward/0'].attrs.modify('kind', np.bytes_(b'replay'))\n");
  h = run_h5diff("", a, attr, (dir_ / "attr.out").string());
  EXPECT_EQ(h.exit_status, 1);
  EXPECT_TRUE(h.differing.empty());
  CompareResult attr_ours = compare(a, attr);
  EXPECT_FALSE(attr_ours.equal());
  EXPECT_TRUE(attr_ours.diffs.empty());
  ASSERT_EQ(attr_ours.attribute_diffs.size(), 1u);
  EXPECT_EQ(attr_ours.attribute_diffs[0].object, "/forward/0");
  EXPECT_EQ(attr_ours.attribute_diffs[0].name, "kind");
}

}  // namespace
}  // namespace splitcheck
