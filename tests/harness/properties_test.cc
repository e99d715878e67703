// GPU properties (harness/lanes/properties.h) on the cpu backend: the row comparison
// counts what differs and fails closed on mismatched shapes; the measurement runs the
// three pairs of forwards of k3-tiny and reports what it finds.
#include "harness/lanes/properties.h"

#include <gtest/gtest.h>

#include <cstring>

#include "harness/engine/run.h"
#include "tests/scenario_fixture.h"

namespace splitcheck {
namespace {

Tensor logits(int64_t rows, int64_t v) {
  Tensor t = Tensor::zeros(DType::kF32, {rows, v});
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = static_cast<float>((i * 37) % 101) / 7.0f - 5.0f;
  return t;
}

TEST(PropertiesTest, RowComparisonCountsFlippedBitsRowsAndChangedArgmax) {
  const Tensor a = logits(4, 64);
  Tensor b = a.clone();
  Result<RowsDifference> same = compare_logit_rows(a, b);
  ASSERT_TRUE(same.is_ok());
  EXPECT_TRUE(same->identical());
  EXPECT_EQ(same->rows, 4);
  EXPECT_EQ(same->elements, 256);
  EXPECT_EQ(same->elements_differing, 0);

  // One low bit of row 1 (not its largest value): one element, one row, same argmax.
  uint32_t bits;
  std::memcpy(&bits, &b.data<float>()[64 + 3], 4);
  bits ^= 1u;
  std::memcpy(&b.data<float>()[64 + 3], &bits, 4);
  // Row 3's element 10 becomes its largest: its greedy token changes.
  b.data<float>()[3 * 64 + 10] = 1e6f;
  // -0.0 against 0.0 in row 2: equal as numbers, different bits.
  Tensor a2 = a.clone();
  a2.data<float>()[2 * 64 + 5] = 0.0f;
  b.data<float>()[2 * 64 + 5] = -0.0f;
  Result<RowsDifference> d = compare_logit_rows(a2, b);
  ASSERT_TRUE(d.is_ok());
  EXPECT_FALSE(d->identical());
  EXPECT_EQ(d->rows_differing, 3);
  EXPECT_EQ(d->elements_differing, 3);
  EXPECT_EQ(d->argmax_changed, 1);
  EXPECT_GT(d->max_abs_diff, 1e5);
}

// The properties of a "cuda" scenario once ran on the CPU: they loaded host weights, and
// the registry runs an op where its weight lives. Every engine built for a scenario now
// checks that its weights are on the backend's device.
TEST(PropertiesTest, WeightsOffTheBackendsDeviceAreRefusedNamingOne) {
  WeightStore host;
  host.put("model.embed_tokens.weight", Tensor::zeros(DType::kBF16, {4, 8}));
  EXPECT_TRUE(check_weights_on_backend(host, "cpu").is_ok());
  const Status st = check_weights_on_backend(host, "cuda");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("model.embed_tokens.weight"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("host"), std::string::npos) << st.message();
}

TEST(PropertiesTest, RowComparisonRefusesMismatchedShapesOrTypes) {
  EXPECT_FALSE(compare_logit_rows(logits(4, 64), logits(3, 64)).is_ok());
  EXPECT_FALSE(compare_logit_rows(logits(4, 64), Tensor::zeros(DType::kBF16, {4, 64})).is_ok());
}

TEST(PropertiesTest, MeasuresTheThreePairsOnTheCpuAndReportsThemAsJson) {
  Scenario s = committed_scenario("default");
  s.workload.max_prompt_tokens = 12;  // 12 tokens: h 6, a verify block of 6 rows
  Result<PropertyReport> r = measure_properties(s);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->prompt_tokens, 12);
  EXPECT_EQ(r->split_at, 6);
  EXPECT_EQ(r->gamma, 5);  // gamma 7, capped by the 6 tokens after h (one left to predict)
  EXPECT_EQ(r->chunk, 3);
  ASSERT_EQ(r->rows.size(), 3u);
  const int64_t v = s.model.vocab_size;
  const char* names[3] = {"decode_vs_prefill", "verify_vs_decode", "chunked_vs_whole"};
  const int64_t rows[3] = {6, 6, 12};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(names[i]);
    EXPECT_EQ(r->rows[i].name, names[i]);
    EXPECT_EQ(r->rows[i].difference.rows, rows[i]);
    EXPECT_EQ(r->rows[i].difference.elements, rows[i] * v);
    // Measured on the cpu backend: every row of a product is computed on its own, in one
    // order, so a token's logits do not depend on its forward's row count (below 256
    // tokens a forward, where the attn_res fallback's BLOCK_L rule does not change).
    EXPECT_TRUE(r->rows[i].difference.identical())
        << r->rows[i].difference.elements_differing << " elements differ";
  }
  const nlohmann::json j = properties_json(*r);
  EXPECT_EQ(j["backend"], "cpu");
  ASSERT_EQ(j["properties"].size(), 3u);
  EXPECT_EQ(j["properties"][1]["name"], "verify_vs_decode");
  EXPECT_EQ(j["properties"][1]["rows"], 6);
  EXPECT_EQ(j["properties"][1]["fraction_elements_differing"], 0.0);
  EXPECT_EQ(j["properties"][1]["identical"], true);
}

TEST(PropertiesTest, APromptOfOneTokenIsInvalidInput) {
  Scenario s = committed_scenario("default");
  s.workload.max_prompt_tokens = 1;
  Result<PropertyReport> r = measure_properties(s);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(r.status().message().find("/workload"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace splitcheck
