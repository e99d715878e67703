// attn_res (SPEC 2.2): both variants on inputs whose exact result is known, the native
// eligibility rule row by row, the fallback's tile width, and the dispatch event it leaves.
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace splitcheck {
namespace {

constexpr std::array<const char*, 2> kVariants = {"native", "fallback"};

Tensor filled(Shape shape, float value) {
  Tensor t = Tensor::zeros(DType::kBF16, std::move(shape));
  for (bf16& v : t.span<bf16>()) v = to_bf16(value);
  return t;
}

// One attn_res call's tensors, T tokens, H channels, `rows` bank rows.
struct AttnResCase {
  Tensor prefix, delta, bank, norm_w, proj_w, out_w, out;
  std::vector<int> native_sizes;

  AttnResCase(int64_t t, int64_t h, int64_t rows)
      : prefix(filled({t, h}, 0.0f)),
        delta(filled({t, h}, 0.0f)),
        bank(filled({t, rows, h}, 0.0f)),
        norm_w(filled({h}, 1.0f)),
        proj_w(filled({h}, 1.0f)),
        out_w(filled({h}, 1.0f)),
        out(filled({t, h}, -7.0f)),
        native_sizes{static_cast<int>(h)} {}

  // Arguments with a delta, out_w, nb and no bank write: eligible for native.
  AttnResArgs args(int nb) {
    AttnResArgs a;
    a.prefix = &prefix;
    a.delta = &delta;
    a.bank = &bank;
    a.norm_w = &norm_w;
    a.proj_w = &proj_w;
    a.out_w = &out_w;
    a.nb = nb;
    a.write_idx = -1;
    a.eps = 0.0f;
    a.out_eps = 0.0f;
    a.native_hidden_sizes = native_sizes;
    a.out = &out;
    return a;
  }

  void set_bank_row(int64_t row, float value) {
    const int64_t t_count = bank.dim(0), rows = bank.dim(1), h = bank.dim(2);
    for (int64_t t = 0; t < t_count; ++t)
      for (int64_t d = 0; d < h; ++d) bank.data<bf16>()[(t * rows + row) * h + d] = to_bf16(value);
  }
};

void expect_all(const Tensor& t, float value, const std::string& what) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    ASSERT_EQ(t.data<bf16>()[i].bits, to_bf16(value).bits)
        << what << " element " << i << ": " << to_f32(t.data<bf16>()[i]) << " != " << value;
  }
}

TEST(AttnResVariantsTest, NoBankAbsorbsDeltaAndOutputsThePrefix) {
  for (const char* variant : kVariants) {
    AttnResCase c(3, 8, 1);
    c.prefix = filled({3, 8}, 1.0f);
    c.delta = filled({3, 8}, 0.5f);
    AttnResArgs a = c.args(0);
    a.out_w = nullptr;
    run_variant("attn_res", variant, &a);
    expect_all(c.prefix, 1.5f, std::string(variant) + " prefix");
    expect_all(c.out, 1.5f, std::string(variant) + " out");
  }
}

TEST(AttnResVariantsTest, DeltaAbsorptionRoundsToNearestEven) {
  // 1 + 2^-8 is a tie between 0x3f80 and 0x3f81 -> 0x3f80; 0x3f81 + 2^-8 -> 0x3f82.
  for (const char* variant : kVariants) {
    AttnResCase c(2, 4, 1);
    for (int64_t d = 0; d < 4; ++d) {
      c.prefix.data<bf16>()[d] = bf16{0x3f80};
      c.prefix.data<bf16>()[4 + d] = bf16{0x3f81};
    }
    c.delta = filled({2, 4}, 0.00390625f);
    AttnResArgs a = c.args(0);
    a.out_w = nullptr;
    run_variant("attn_res", variant, &a);
    for (int64_t d = 0; d < 4; ++d) {
      EXPECT_EQ(c.prefix.data<bf16>()[d].bits, 0x3f80u) << variant;
      EXPECT_EQ(c.prefix.data<bf16>()[4 + d].bits, 0x3f82u) << variant;
      EXPECT_EQ(c.out.data<bf16>()[4 + d].bits, 0x3f82u) << variant;
    }
  }
}

TEST(AttnResVariantsTest, WriteIdxStoresTheAbsorbedPrefixInThatBankRowOnly) {
  for (const char* variant : kVariants) {
    AttnResCase c(2, 8, 3);
    c.set_bank_row(0, 4.0f);
    c.set_bank_row(2, -2.0f);
    for (int64_t d = 0; d < 8; ++d) {
      c.prefix.data<bf16>()[d] = to_bf16(static_cast<float>(d));
      c.prefix.data<bf16>()[8 + d] = to_bf16(-static_cast<float>(d));
    }
    c.delta = filled({2, 8}, 0.25f);
    AttnResArgs a = c.args(1);
    a.write_idx = 1;
    run_variant("attn_res", variant, &a);
    for (int64_t t = 0; t < 2; ++t) {
      for (int64_t d = 0; d < 8; ++d) {
        const bf16* row = c.bank.data<bf16>() + t * 3 * 8;
        const float p = (t == 0 ? 1.0f : -1.0f) * static_cast<float>(d) + 0.25f;
        EXPECT_EQ(row[d].bits, to_bf16(4.0f).bits) << variant << " row 0 untouched";
        EXPECT_EQ(row[8 + d].bits, to_bf16(p).bits) << variant << " row 1 = bf16(p)";
        EXPECT_EQ(row[16 + d].bits, to_bf16(-2.0f).bits) << variant << " row 2 untouched";
      }
    }
  }
}

TEST(AttnResVariantsTest, EqualSourcesMixToThatSourceExactly) {
  // nb = 3 bank rows plus the prefix: 4 equal scores, softmax weights exactly 1/4, and
  // 4 * (v / 4) = v for a bf16 v. nb = 7 gives 8 sources.
  for (int nb : {1, 3, 7}) {
    for (const char* variant : kVariants) {
      AttnResCase c(2, 16, 8);
      for (int i = 0; i < nb; ++i) c.set_bank_row(i, -1.375f);
      c.prefix = filled({2, 16}, -1.375f);
      AttnResArgs a = c.args(nb);
      a.delta = nullptr;
      a.out_w = nullptr;
      run_variant("attn_res", variant, &a);
      expect_all(c.out, -1.375f, std::string(variant) + " nb " + std::to_string(nb));
    }
  }
}

TEST(AttnResVariantsTest, EqualScoresMixTheRawSourcesUniformly) {
  // proj_w = 0 makes every score 0, so m is the plain mean of the (unnormalised) sources:
  // (1 + 2 + 3 + 6) / 4 = 3.
  for (const char* variant : kVariants) {
    AttnResCase c(2, 8, 3);
    c.proj_w = filled({8}, 0.0f);
    c.set_bank_row(0, 1.0f);
    c.set_bank_row(1, 2.0f);
    c.set_bank_row(2, 3.0f);
    c.prefix = filled({2, 8}, 6.0f);
    AttnResArgs a = c.args(3);
    a.delta = nullptr;
    a.out_w = nullptr;
    run_variant("attn_res", variant, &a);
    expect_all(c.out, 3.0f, variant);
  }
}

TEST(AttnResVariantsTest, ScoreGapBeyondExpUnderflowSelectsOneSource) {
  // Sources +1 and -1 per channel with proj_w = 16 and H = 8: scores +-128, a gap of 256,
  // so exp(-256) = 0 and the weights are exactly {1, 0}.
  for (const char* variant : kVariants) {
    for (float bank_value : {1.0f, -1.0f}) {
      AttnResCase c(1, 8, 1);
      c.proj_w = filled({8}, 16.0f);
      c.set_bank_row(0, bank_value);
      c.prefix = filled({1, 8}, -bank_value);
      AttnResArgs a = c.args(1);
      a.delta = nullptr;
      a.out_w = nullptr;
      run_variant("attn_res", variant, &a);
      expect_all(c.out, 1.0f, std::string(variant) + " bank " + std::to_string(bank_value));
    }
  }
}

TEST(AttnResVariantsTest, OutputNormOfConstantPowerOfTwoGivesSignTimesOutW) {
  // m = c in every channel, c a power of two, out_eps = 0: rsqrt(mean(m^2)) = 1/|c|
  // exactly, so out = sign(c) * out_w exactly in either multiplication order.
  const std::vector<float> out_w = {0.75f, -1.25f, 3.0f, 0.0078125f, -96.0f, 1.0f, 2.5f, -0.5f};
  for (const char* variant : kVariants) {
    for (float c_value : {2.0f, -0.5f, 64.0f}) {
      for (int nb : {0, 3}) {
        AttnResCase c(2, 8, 4);
        for (int64_t d = 0; d < 8; ++d) c.out_w.data<bf16>()[d] = to_bf16(out_w[d]);
        for (int i = 0; i < nb; ++i) c.set_bank_row(i, c_value);
        c.prefix = filled({2, 8}, c_value);  // delta stays 0: p = c
        AttnResArgs a = c.args(nb);
        run_variant("attn_res", variant, &a);
        for (int64_t t = 0; t < 2; ++t) {
          for (int64_t d = 0; d < 8; ++d) {
            const float want = (c_value > 0 ? 1.0f : -1.0f) * out_w[d];
            EXPECT_EQ(c.out.data<bf16>()[t * 8 + d].bits, to_bf16(want).bits)
                << variant << " c " << c_value << " nb " << nb << " channel " << d;
          }
        }
      }
    }
  }
}

// SPEC 2.2: native only when delta AND out_w are given AND nb > 0 AND write_idx < 0 AND
// H is a native size. One row per condition negated.
TEST(AttnResEligibilityTest, FollowsSpecRowByRow) {
  AttnResCase c(2, 8, 4);
  const std::vector<int> other_sizes = {16, 7168};
  const std::vector<int> with_h = {4, 8, 16};
  struct Row {
    const char* name;
    std::function<void(AttnResArgs&)> edit;
    bool want;
  };
  const Row rows[] = {
      {"all conditions hold", [](AttnResArgs&) {}, true},
      {"no delta", [](AttnResArgs& a) { a.delta = nullptr; }, false},
      {"no out_w", [](AttnResArgs& a) { a.out_w = nullptr; }, false},
      {"nb == 0", [](AttnResArgs& a) { a.nb = 0; }, false},
      {"write_idx == 0", [](AttnResArgs& a) { a.write_idx = 0; }, false},
      {"write_idx == 2", [](AttnResArgs& a) { a.write_idx = 2; }, false},
      {"H not a native size", [&](AttnResArgs& a) { a.native_hidden_sizes = other_sizes; }, false},
      {"no native sizes", [](AttnResArgs& a) { a.native_hidden_sizes = {}; }, false},
      {"H among several sizes", [&](AttnResArgs& a) { a.native_hidden_sizes = with_h; }, true},
      {"nb == 1", [](AttnResArgs& a) { a.nb = 1; }, true},
  };
  for (const Row& row : rows) {
    AttnResArgs a = c.args(2);
    row.edit(a);
    EXPECT_EQ(attn_res_native_eligible(a), row.want) << row.name;
  }
}

TEST(AttnResFallbackBlockLTest, FollowsTheRealFallbacksRule) {
  EXPECT_EQ(attn_res_fallback_block_l(256, 4), 1);
  EXPECT_EQ(attn_res_fallback_block_l(1000, 8), 1);
  EXPECT_EQ(attn_res_fallback_block_l(255, 4), 4);
  EXPECT_EQ(attn_res_fallback_block_l(8, 2), 4);
  EXPECT_EQ(attn_res_fallback_block_l(8, 1), 1);
  EXPECT_EQ(attn_res_fallback_block_l(8, 0), 1);
  EXPECT_EQ(attn_res_fallback_block_l(1, 4), 4);
}

TEST(AttnResDispatchTest, RecordsOneEventWithTheChosenVariantAndContext) {
  const int32_t native = find_kernel("attn_res", "native");
  const int32_t fallback = find_kernel("attn_res", "fallback");
  ASSERT_GE(native, 0);
  ASSERT_GE(fallback, 0);
  ASSERT_NE(native, fallback);
  for (bool eligible : {true, false}) {
    AttnResCase c(2, 8, 4);
    c.set_bank_row(0, 1.0f);
    c.set_bank_row(1, -2.0f);
    c.prefix = filled({2, 8}, 0.5f);
    c.delta = filled({2, 8}, 0.25f);
    AttnResArgs a = c.args(2);
    if (!eligible) a.delta = nullptr;
    DispatchTrace trace;
    const KernelContext ctx{&trace, 5, 11, Site::kPreMlp, 3, -1};
    attn_res(ctx, a);
    ASSERT_EQ(trace.events.size(), 1u);
    const DispatchEvent& e = trace.events[0];
    EXPECT_EQ(e.kernel, eligible ? native : fallback);
    EXPECT_EQ(e.forward, 5);
    EXPECT_EQ(e.layer, 11);
    EXPECT_EQ(e.site, Site::kPreMlp);
    EXPECT_EQ(e.stage, 3);
    EXPECT_EQ(e.aux, -1);

    // The dispatched call ran that variant: a direct run on a fresh copy gives the same bits.
    AttnResCase d(2, 8, 4);
    d.set_bank_row(0, 1.0f);
    d.set_bank_row(1, -2.0f);
    d.prefix = filled({2, 8}, 0.5f);
    d.delta = filled({2, 8}, 0.25f);
    AttnResArgs b = d.args(2);
    if (!eligible) b.delta = nullptr;
    run_variant("attn_res", eligible ? "native" : "fallback", &b);
    EXPECT_TRUE(c.out.bit_equal(d.out));
    EXPECT_TRUE(c.prefix.bit_equal(d.prefix));
  }
}

TEST(AttnResDispatchTest, NullTraceRecordsNothingButStillRuns) {
  AttnResCase c(1, 8, 1);
  c.prefix = filled({1, 8}, 2.0f);
  AttnResArgs a = c.args(0);
  a.out_w = nullptr;
  const KernelContext ctx{nullptr, 0, 0, Site::kTap, 0, 4};
  attn_res(ctx, a);
  expect_all(c.out, 2.0f, "out");
}

}  // namespace
}  // namespace splitcheck
