// Datasets compared from their files (StoredTensor, reference/record.h) say exactly what
// the same tensors compared in memory say: every field of the diff, the verdict line, and
// through the runner's load_dump and the judge's compare_records, the case's message. A
// stored dataset whose file changed since it was loaded is an error naming the file and
// the dataset, never a comparison.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "harness/dump/blocks.h"
#include "harness/dump/compare.h"
#include "harness/dump/dump.h"
#include "harness/judge/judge.h"
#include "harness/runner/engine_dump.h"
#include "harness/runner/interrupt.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSite = "/forward/0/layers/0/pre_attn";

// A bf16 [rows, 1024] ramp; `edit` changes it: a few mismatches, a NaN, an infinity.
Tensor site_tensor(int64_t rows, bool edit) {
  Tensor t = Tensor::zeros(DType::kBF16, {rows, 1024});
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<bf16>()[i] = to_bf16(static_cast<float>(i % 251) * 0.25f - 30.0f);
  if (edit) {
    bf16* p = t.data<bf16>();
    p[3 * 1024 + 41] = to_bf16(to_f32(p[3 * 1024 + 41]) * 1.01f);
    p[t.numel() / 2] = to_bf16(std::numeric_limits<float>::quiet_NaN());
    p[t.numel() - 1] = to_bf16(std::numeric_limits<float>::infinity());
  }
  return t;
}

class StreamedCompareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("splitcheck-streamed-compare-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A dump holding input_ids, the site tensor and logits.
  std::string write(const std::string& name, const Tensor& site) {
    const std::string path = (dir_ / name).string();
    DumpHeader h;
    h.created = "2024-05-01T12:00:00Z";
    Result<DumpWriter> w = DumpWriter::create(path, h);
    EXPECT_TRUE(w.is_ok()) << w.status().message();
    Tensor ids = Tensor::zeros(DType::kI32, {4});
    Tensor logits = Tensor::zeros(DType::kF32, {4, 8});
    EXPECT_TRUE(w->write("/forward/0/input_ids", ids).is_ok());
    EXPECT_TRUE(w->write(kSite, site).is_ok());
    EXPECT_TRUE(w->write("/forward/0/logits", logits).is_ok());
    EXPECT_TRUE(w->finish().is_ok());
    return path;
  }

  static RecordEntry stored(const std::string& file, const Tensor& like) {
    Result<DumpReader> r = DumpReader::open(file);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    RecordEntry e;
    e.path = std::string(kSite).substr(1);
    e.tensor = Tensor::borrow(like.dtype(), like.shape(), nullptr);
    e.stored = StoredTensor{file, kSite, r->find(kSite)->digest};
    return e;
  }

  fs::path dir_;
};

void expect_same_diff(const TensorDiff& a, const TensorDiff& b) {
  EXPECT_EQ(a.path, b.path);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.order, b.order);
  EXPECT_EQ(a.mismatches, b.mismatches);
  EXPECT_EQ(a.first_index, b.first_index);
  EXPECT_EQ(a.first_row, b.first_row);
  EXPECT_EQ(a.first_col, b.first_col);
  EXPECT_EQ(a.first_a_bits, b.first_a_bits);
  EXPECT_EQ(a.first_b_bits, b.first_b_bits);
  EXPECT_EQ(a.max_ulp, b.max_ulp);
  EXPECT_EQ(a.max_abs, b.max_abs);
  EXPECT_EQ(a.cosine, b.cosine);
  EXPECT_EQ(a.digest_equal, b.digest_equal);
  EXPECT_EQ(a.nan_mismatch, b.nan_mismatch);
  EXPECT_EQ(a.non_finite_mismatch, b.non_finite_mismatch);
  EXPECT_EQ(verdict_line(a), verdict_line(b));
}

TEST_F(StreamedCompareTest, StoredEntriesDiffAsTheirTensorsDo) {
  const Tensor a = site_tensor(64, false), b = site_tensor(64, true);
  const std::string fa = write("a.h5", a), fb = write("b.h5", b);
  Result<CompareResult> memory = compare_tensors(kSite, a, b);
  ASSERT_TRUE(memory.is_ok());
  ASSERT_EQ(memory->diffs.size(), 1u);
  // Blocks far smaller than the dataset, so the statistics cross block boundaries.
  CompareOptions small;
  small.chunk_bytes = 4096;
  for (const CompareOptions& options : {CompareOptions{}, small}) {
    Result<CompareResult> streamed = compare_entries(stored(fa, a), stored(fb, b), options);
    ASSERT_TRUE(streamed.is_ok()) << streamed.status().message();
    EXPECT_EQ(streamed->datasets_compared, 1);
    ASSERT_EQ(streamed->diffs.size(), 1u);
    expect_same_diff(streamed->diffs[0], memory->diffs[0]);
  }
  Result<CompareResult> same = compare_entries(stored(fa, a), stored(write("a2.h5", a), a));
  ASSERT_TRUE(same.is_ok()) << same.status().message();
  EXPECT_TRUE(same->equal());
  EXPECT_EQ(same->datasets_compared, 1);
}

TEST_F(StreamedCompareTest, AStoredDatasetChangedSinceLoadedIsAnError) {
  const Tensor a = site_tensor(8, false), b = site_tensor(8, true);
  const std::string fa = write("a.h5", a), fb = write("b.h5", a);
  const RecordEntry ea = stored(fa, a), eb = stored(fb, a);
  write("b.h5", b);  // replaced after "loading"
  Result<CompareResult> r = compare_entries(ea, eb);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find(fb), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(kSite), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("changed since loaded"), std::string::npos);
}

// 8192 x 1024 bf16 is 16 MiB + 0: over load_dump's bound only with one row more.
TEST_F(StreamedCompareTest, LoadDumpLeavesLargeDatasetsInTheirFileAndJudgesThemTheSame) {
  const Tensor a = site_tensor(8193, false), b = site_tensor(8193, true);
  const std::string fa = write("a.h5", a), fb = write("b.h5", b);
  Result<LoadedDump> la = load_dump(fa, /*reference=*/true), lb = load_dump(fb);
  ASSERT_TRUE(la.is_ok()) << la.status().message();
  ASSERT_TRUE(lb.is_ok()) << lb.status().message();
  const RecordEntry* site = nullptr;
  for (const RecordEntry& e : lb->record.entries())
    if ("/" + e.path == kSite) site = &e;
  ASSERT_NE(site, nullptr);
  ASSERT_TRUE(site->stored.has_value());
  EXPECT_TRUE(site->tensor.empty());
  EXPECT_EQ(site->stored->file, fb);
  EXPECT_FALSE(lb->record.entries().front().stored.has_value());  // input_ids: held

  // The same case judged from records held in memory.
  RunRecord ma, mb;
  for (RunRecord* r : {&ma, &mb}) r->add("forward/0/input_ids", Tensor::zeros(DType::kI32, {4}));
  ma.add(std::string(kSite).substr(1), a.clone());
  mb.add(std::string(kSite).substr(1), b.clone());
  for (RunRecord* r : {&ma, &mb}) r->add("forward/0/logits", Tensor::zeros(DType::kF32, {4, 8}));
  CaseResult from_files, from_memory;
  ASSERT_TRUE(compare_records(la->record, lb->record, from_files).is_ok());
  ASSERT_TRUE(compare_records(ma, mb, from_memory).is_ok());
  EXPECT_EQ(from_files.verdict, Verdict::kDiverged);
  EXPECT_EQ(from_files.verdict, from_memory.verdict);
  EXPECT_EQ(from_files.message, from_memory.message);
  EXPECT_EQ(from_files.datasets_compared, from_memory.datasets_compared);
  EXPECT_EQ(from_files.datasets_differing, from_memory.datasets_differing);
  ASSERT_TRUE(from_files.first_divergence.has_value());
  expect_same_diff(*from_files.first_divergence, *from_memory.first_divergence);

  // A stored dataset against itself (PP=1's self-check) streams both sides: a pass.
  CaseResult self;
  ASSERT_TRUE(compare_records(la->record, la->record, self).is_ok());
  EXPECT_EQ(self.verdict, Verdict::kPass) << self.message;
  EXPECT_FALSE(la->content_sha256.empty());
}

// Once splitcheck is interrupted, no streamed read goes on to the end of its dataset: loading
// and comparing stop at the next block, with an error saying why.
TEST_F(StreamedCompareTest, ReadingStopsAtTheNextBlockOnceInterrupted) {
  const Tensor a = site_tensor(8193, false);
  const std::string fa = write("a.h5", a), fb = write("b.h5", a);
  const RecordEntry ea = stored(fa, a), eb = stored(fb, a);
  dump_reading_stopped().store(true);
  Result<LoadedDump> loaded = load_dump(fa);
  Result<CompareResult> compared = compare_entries(ea, eb);
  reset_interrupt_for_testing();
  EXPECT_FALSE(dump_reading_stopped().load());
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_NE(loaded.status().message().find("interrupted"), std::string::npos)
      << loaded.status().message();
  ASSERT_FALSE(compared.is_ok());
  EXPECT_NE(compared.status().message().find("interrupted"), std::string::npos)
      << compared.status().message();
  // Reset, the same reads go through.
  EXPECT_TRUE(load_dump(fa).is_ok());
  Result<CompareResult> again = compare_entries(ea, eb);
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  EXPECT_TRUE(again->equal());
}

}  // namespace
}  // namespace splitcheck
