// The bitwise comparator: equal and unequal dumps, bit-level reporting, NaN, structural
// problems, streaming in small blocks, and agreement with h5diff.
#include "harness/dump/compare.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
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
  CompareResult trusted = compare(a, b);
  EXPECT_TRUE(trusted.equal());
  EXPECT_EQ(trusted.datasets_compared, 5);
  EXPECT_EQ(trusted.bytes_read, 0);  // proven equal by digests alone
  EXPECT_EQ(verdict(trusted), "equal (5 datasets)");

  CompareOptions full;
  full.trust_digest = false;
  CompareResult read = compare(a, b, full);
  EXPECT_TRUE(read.equal());
  EXPECT_GT(read.bytes_read, 0);
  EXPECT_EQ(read.first_divergence(), nullptr);
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

}  // namespace
}  // namespace splitcheck
