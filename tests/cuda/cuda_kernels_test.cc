// Every op of the registry on the GPU against the CPU (close: the GPU sums in its own
// orders), the two attn_res variants against each other (different float32 orders),
// run-to-run and row-count independence. Skipped, saying why, without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "harness/dump/digest.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise.h"
#include "kernels/ops.h"
#include "tests/cuda/gpu_test_support.h"
#ifdef SPLITCHECK_HAVE_CUDA
#include "kernels/cuda/kda.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/skinny.h"
#endif

namespace splitcheck {
namespace {

using testing::difference;
using testing::random_bf16;

constexpr double kClose = 0.03;  // max |gpu - cpu| / max |cpu|: a few bf16 steps

Tensor on_gpu(const Tensor& t) { return t.to(Device::kCuda); }
Tensor zeros_like(const Tensor& t, Device d) { return Tensor::zeros(t.dtype(), t.shape(), d); }

TEST(CudaRegistryTest, EveryRowHasACudaFunctionInACudaBuild) {
#ifdef SPLITCHECK_HAVE_CUDA
  // Test-only rows (variant "..._for_test", never eligible outside a test hook) are CPU-only.
  for (const KernelRow& row : kernel_registry()) {
    if (row.variant.ends_with("_for_test")) continue;
    EXPECT_NE(row.cuda, nullptr) << row.op << "." << row.variant;
  }
#else
  for (const KernelRow& row : kernel_registry())
    EXPECT_EQ(row.cuda, nullptr) << row.op << "." << row.variant;
#endif
}

TEST(CudaRegistryTest, ACudaTensorIsRefusedWhereNoDeviceRunsIt) {
  if (testing::gpu_unavailable().empty()) GTEST_SKIP() << "a CUDA device is usable here";
  EXPECT_THROW(Tensor::zeros(DType::kBF16, {4}, Device::kCuda), std::exception);
}

// attn_res inputs: T tokens, H channels, `rows` bank rows of which nb are read.
struct AttnResCase {
  Tensor prefix, delta, bank, norm_w, proj_w, out_w, out;
  std::vector<int> native{0};
  AttnResArgs args(int nb, int write_idx, bool with_delta, bool with_out_w) {
    native[0] = static_cast<int>(prefix.dim(1));
    return AttnResArgs{&prefix, with_delta ? &delta : nullptr,
                       &bank,   &norm_w,
                       &proj_w, with_out_w ? &out_w : nullptr,
                       nb,      write_idx,
                       1e-6f,   1e-6f,
                       native,  &out};
  }
};

AttnResCase attn_res_case(int64_t t, int64_t h, int64_t rows, uint64_t seed) {
  AttnResCase c;
  c.prefix = random_bf16({t, h}, seed, 1.0f);
  c.delta = random_bf16({t, h}, seed + 1, 0.5f);
  c.bank = random_bf16({t, rows, h}, seed + 2, 1.0f);
  c.norm_w = random_bf16({h}, seed + 3, 0.1f, 1.0f);
  c.proj_w = random_bf16({h}, seed + 4, 2.0f / std::sqrt(static_cast<float>(h)));
  c.out_w = random_bf16({h}, seed + 5, 0.1f, 1.0f);
  c.out = Tensor::zeros(DType::kBF16, {t, h});
  return c;
}

AttnResCase to_device(const AttnResCase& c, Device d) {
  AttnResCase g;
  g.prefix = c.prefix.to(d);
  g.delta = c.delta.to(d);
  g.bank = c.bank.to(d);
  g.norm_w = c.norm_w.to(d);
  g.proj_w = c.proj_w.to(d);
  g.out_w = c.out_w.to(d);
  g.out = zeros_like(c.out, d);
  return g;
}

TEST(CudaAttnResTest, BothVariantsAreCloseToTheCpuAndWriteTheSameState) {
  SPLITCHECK_REQUIRE_GPU();
  for (const char* variant : {"native", "fallback"}) {
    // Every kernel shape: the register kernel (two groups a thread, bank rows in
    // registers) at 8 channels a group (256: one warp, 7168, 8192: 512 threads) and at one
    // (100); the general kernel (rows read again, the mixture in shared memory) at 8
    // channels (9216) and one (1500), and past 48 KiB of mixture (16384, 20001).
    for (int64_t h : {256, 7168, 100, 8192, 9216, 1500, 16384, 20001}) {
      // Bank rows past the 8 held in registers (nb 10), more sources than a warp has lanes
      // (nb 40), a source the call writes first (write_idx 2 < nb 4), no delta nor out_w,
      // no source but the prefix.
      for (auto [nb, write_idx, with_delta, with_out_w] :
           {std::tuple{4, -1, true, true}, std::tuple{3, 3, true, true},
            std::tuple{10, -1, true, true}, std::tuple{40, -1, true, true},
            std::tuple{4, 2, true, true}, std::tuple{5, -1, false, false},
            std::tuple{0, 0, false, true}}) {
        SCOPED_TRACE(std::string(variant) + " h=" + std::to_string(h) +
                     " nb=" + std::to_string(nb) + " write_idx=" + std::to_string(write_idx));
        AttnResCase cpu = attn_res_case(9, h, 48, 7 + h);
        AttnResCase gpu = to_device(cpu, Device::kCuda);
        AttnResArgs a = cpu.args(nb, write_idx, with_delta, with_out_w);
        AttnResArgs b = gpu.args(nb, write_idx, with_delta, with_out_w);
        run_variant("attn_res", variant, &a);
        run_variant("attn_res", variant, &b);
        ASSERT_EQ(gpu.out.device(), Device::kCuda);
        EXPECT_LE(difference(cpu.out, gpu.out).max_rel, kClose);
        // Steps 1 and 2 round once, in the same way on both: exact.
        EXPECT_TRUE(cpu.prefix.bit_equal(gpu.prefix.to(Device::kCpu)));
        EXPECT_TRUE(cpu.bank.bit_equal(gpu.bank.to(Device::kCpu)));
      }
    }
  }
}

TEST(CudaAttnResTest, VariantsDifferOnAMeasuredFractionAndEachIsRepeatableAndRowIndependent) {
  SPLITCHECK_REQUIRE_GPU();
  const int64_t t = 64, h = 7168;
  const AttnResCase base = attn_res_case(t, h, 8, 99);
  Tensor outs[2];
  const char* variants[2] = {"native", "fallback"};
  for (int v = 0; v < 2; ++v) {
    AttnResCase g1 = to_device(base, Device::kCuda), g2 = to_device(base, Device::kCuda);
    AttnResArgs a1 = g1.args(8, -1, true, true), a2 = g2.args(8, -1, true, true);
    run_variant("attn_res", variants[v], &a1);
    run_variant("attn_res", variants[v], &a2);
    EXPECT_TRUE(g1.out.to(Device::kCpu).bit_equal(g2.out.to(Device::kCpu))) << variants[v];
    outs[v] = g1.out.to(Device::kCpu);
    // Token 5 alone gives the bits it has among 64 tokens (both calls are under 256 tokens,
    // so the fallback's BLOCK_L is the same).
    AttnResCase one;
    one.prefix = base.prefix.rows(5, 6).to(Device::kCuda);
    one.delta = base.delta.rows(5, 6).to(Device::kCuda);
    one.bank = base.bank.rows(5, 6).to(Device::kCuda);
    one.norm_w = base.norm_w.to(Device::kCuda);
    one.proj_w = base.proj_w.to(Device::kCuda);
    one.out_w = base.out_w.to(Device::kCuda);
    one.out = Tensor::zeros(DType::kBF16, {1, h}, Device::kCuda);
    AttnResArgs a = one.args(8, -1, true, true);
    run_variant("attn_res", variants[v], &a);
    EXPECT_TRUE(one.out.to(Device::kCpu).bit_equal(outs[v].rows(5, 6).clone())) << variants[v];
  }
  const testing::Difference d = difference(outs[0], outs[1]);
  std::printf(
      "[ measured ] CUDA attn_res native vs fallback, T %lld, H %lld, 8 bank rows: "
      "%lld of %lld elements differ (%.4f%%; the real pair: 0.008%%), max rel %.3g\n",
      static_cast<long long>(t), static_cast<long long>(h), static_cast<long long>(d.differing),
      static_cast<long long>(d.total), 100.0 * d.differing / d.total, d.max_rel);
  EXPECT_GT(d.differing, 0) << "the variants must sum in different orders";
  EXPECT_LE(d.max_rel, kClose);
}

// A token's output bits do not depend on how many tokens share the call: the last rows of
// a 1100-token call against the same rows alone (64 for native; 300 for the fallback, whose
// BLOCK_L rule changes at 256 tokens, so both of its calls are past it). Both kernel shapes.
TEST(CudaAttnResTest, ATokensBitsDoNotDependOnTheCallsTokenCount) {
  SPLITCHECK_REQUIRE_GPU();
  const int64_t big = 1100;
  for (int64_t h : {7168, 9216}) {
    const AttnResCase base = attn_res_case(big, h, 8, 500 + h);
    for (auto [variant, small] :
         {std::pair{"native", int64_t{64}}, std::pair{"fallback", int64_t{300}}}) {
      SCOPED_TRACE(std::string(variant) + " h=" + std::to_string(h));
      AttnResCase all = to_device(base, Device::kCuda);
      AttnResArgs a = all.args(8, -1, true, true);
      run_variant("attn_res", variant, &a);
      AttnResCase part;
      part.prefix = base.prefix.rows(big - small, big).to(Device::kCuda);
      part.delta = base.delta.rows(big - small, big).to(Device::kCuda);
      part.bank = base.bank.rows(big - small, big).to(Device::kCuda);
      part.norm_w = base.norm_w.to(Device::kCuda);
      part.proj_w = base.proj_w.to(Device::kCuda);
      part.out_w = base.out_w.to(Device::kCuda);
      part.out = Tensor::zeros(DType::kBF16, {small, h}, Device::kCuda);
      AttnResArgs b = part.args(8, -1, true, true);
      run_variant("attn_res", variant, &b);
      const Tensor whole = all.out.to(Device::kCpu);
      EXPECT_TRUE(part.out.to(Device::kCpu).bit_equal(whole.rows(big - small, big).clone()));
      EXPECT_TRUE(part.prefix.to(Device::kCpu)
                      .bit_equal(all.prefix.to(Device::kCpu).rows(big - small, big).clone()));
    }
  }
}

// Each variant's bits, pinned: XXH64 over the outputs and the state every kernel shape and
// argument combination writes, at both BLOCK_L values (9 tokens: 4; 300 tokens: 1), against
// the value committed here. A change of the kernels that keeps their float32 orders keeps
// these; one that changes any bit fails here first (then the GPU golden must be re-made,
// scripts/gpu-check.sh's golden-cuda-update, and these values with it).
TEST(CudaAttnResTest, EachVariantKeepsItsCommittedBits) {
  SPLITCHECK_REQUIRE_GPU();
  const std::pair<const char*, uint64_t> pinned[] = {{"native", 0xba125a8b00e5aad2ull},
                                                     {"fallback", 0x963122b0726f49aeull}};
  for (auto [variant, expected] : pinned) {
    Xxh64 bits;
    for (auto [t, h] : {std::pair<int64_t, int64_t>{9, 256},
                        {9, 7168},
                        {300, 7168},
                        {9, 100},
                        {9, 9216},
                        {9, 1500},
                        {300, 1500}}) {
      const AttnResCase host = attn_res_case(t, h, 48, 31 + h + t);
      for (auto [nb, write_idx, with_delta, with_out_w] :
           {std::tuple{4, -1, true, true}, std::tuple{8, -1, true, true},
            std::tuple{10, -1, true, true}, std::tuple{40, -1, true, true},
            std::tuple{4, 2, true, true}, std::tuple{5, -1, false, false},
            std::tuple{0, 0, false, true}}) {
        AttnResCase gpu = to_device(host, Device::kCuda);
        AttnResArgs a = gpu.args(nb, write_idx, with_delta, with_out_w);
        run_variant("attn_res", variant, &a);
        for (const Tensor* x : {&gpu.out, &gpu.prefix, &gpu.bank}) {
          const Tensor back = x->to(Device::kCpu);
          bits.update({back.bytes(), back.nbytes()});
        }
      }
    }
    EXPECT_EQ(bits.digest(), expected)
        << variant << ": bits now 0x" << std::hex << bits.digest() << " (see the comment above)";
  }
}

TEST(CudaOpsTest, EmbedRmsNormHeadAndArgmaxMatchTheCpu) {
  SPLITCHECK_REQUIRE_GPU();
  const int64_t t = 7, h = 256, v = 512;
  Tensor table = random_bf16({v, h}, 1, 1.0f);
  Tensor ids = Tensor::zeros(DType::kI32, {t});
  for (int64_t i = 0; i < t; ++i) ids.data<int32_t>()[i] = static_cast<int32_t>((i * 37) % v);
  Tensor e_cpu = Tensor::zeros(DType::kBF16, {t, h});
  Tensor table_g = on_gpu(table), e_gpu = Tensor::zeros(DType::kBF16, {t, h}, Device::kCuda);
  EmbedArgs ea{&ids, &table, &e_cpu}, eb{&ids, &table_g, &e_gpu};  // host ids: staged
  run_variant("embed", "gather", &ea);
  run_variant("embed", "gather", &eb);
  EXPECT_TRUE(e_cpu.bit_equal(e_gpu.to(Device::kCpu)));

  Tensor w = random_bf16({h}, 2, 0.1f, 1.0f), w_g = on_gpu(w);
  Tensor n_cpu = Tensor::zeros(DType::kBF16, {t, h}), n_gpu = zeros_like(n_cpu, Device::kCuda);
  RmsNormArgs na{&e_cpu, &w, 1e-6f, &n_cpu}, nb{&e_gpu, &w_g, 1e-6f, &n_gpu};
  run_variant("rms_norm", "rows", &na);
  run_variant("rms_norm", "rows", &nb);
  EXPECT_LE(difference(n_cpu, n_gpu).max_rel, kClose);

  Tensor head = random_bf16({v, h}, 3, 0.1f), head_g = on_gpu(head);
  Tensor l_cpu = Tensor::zeros(DType::kF32, {t, v}), l_gpu = zeros_like(l_cpu, Device::kCuda);
  LmHeadArgs la{&n_cpu, &head, &l_cpu}, lb{&n_gpu, &head_g, &l_gpu};
  run_variant("lm_head", "matmul_nt", &la);
  run_variant("lm_head", "matmul_nt", &lb);
  EXPECT_LE(difference(l_cpu, l_gpu).max_rel, kClose);

  // argmax on the same logits: exact, ties to the lowest index.
  Tensor logits = l_gpu.to(Device::kCpu);
  logits.data<float>()[3 * v + 10] = 1e9f;
  logits.data<float>()[3 * v + 400] = 1e9f;
  Tensor logits_g = on_gpu(logits);
  Tensor k_cpu = Tensor::zeros(DType::kI32, {t}), k_gpu = zeros_like(k_cpu, Device::kCuda);
  ArgmaxArgs aa{&logits, &k_cpu}, ab{&logits_g, &k_gpu};
  run_variant("argmax", "lowest_index", &aa);
  run_variant("argmax", "lowest_index", &ab);
  EXPECT_TRUE(k_cpu.bit_equal(k_gpu.to(Device::kCpu)));
  EXPECT_EQ(k_gpu.to(Device::kCpu).data<int32_t>()[3], 10);
}

// A thread's waits for the device are counted where the host reads a result, not where
// it queues work (serving_benchmark splits a step's time by them), and per thread.
TEST(CudaRuntimeTest, AHostReadCountsAsAWaitAndQueuedWorkDoesNot) {
  SPLITCHECK_REQUIRE_GPU();
  Tensor x = on_gpu(random_bf16({64, 512}, 21, 1.0f));
  Tensor w = on_gpu(random_bf16({512, 512}, 22, 1.0f / 16.0f));
  Tensor out = Tensor::zeros(DType::kBF16, {64, 512}, Device::kCuda);
  finish_thread_device_work();
  const double before = thread_device_wait_seconds();
  LinearArgs a{&x, &w, &out};
  for (int i = 0; i < 8; ++i) run_variant("linear", "matmul", &a);
  EXPECT_EQ(thread_device_wait_seconds(), before) << "queueing device work waited";
  const Tensor host = out.to(Device::kCpu);
  EXPECT_GT(thread_device_wait_seconds(), before) << "a copy to the host was not counted";
  double other = -1.0;
  std::thread([&] { other = thread_device_wait_seconds(); }).join();
  EXPECT_EQ(other, 0.0) << "another thread's count includes this thread's waits";
}

// zeros() clears what the pool hands back: a block that held other bytes a moment ago
// comes back as zeros (for_overwrite's would not be).
TEST(CudaRuntimeTest, ZerosClearsMemoryThePoolReuses) {
  SPLITCHECK_REQUIRE_GPU();
  for (int i = 0; i < 4; ++i) {
    Tensor used = on_gpu(random_bf16({256, 256}, 30 + i, 1.0f));
    finish_thread_device_work();
  }  // freed to the pool, which keeps their bytes
  const Tensor z = Tensor::zeros(DType::kBF16, {256, 256}, Device::kCuda).to(Device::kCpu);
  const auto* u = z.data<uint16_t>();
  EXPECT_TRUE(std::all_of(u, u + z.numel(), [](uint16_t v) { return v == 0; }));
}

// The check behind Tensor::for_overwrite (gpu-check's uncleared-fill step): under two fill
// bytes a read of bytes nobody wrote gives two results (here an add of two tensors made for
// overwriting and never written), and work that writes what it reads gives one (a copy to
// the device, then an add of the copies).
TEST(CudaRuntimeTest, TwoFillsOfUnclearedMemoryShowAReadOfBytesNobodyWrote) {
  SPLITCHECK_REQUIRE_GPU();
#ifdef SPLITCHECK_HAVE_CUDA
  const Tensor x = random_bf16({64, 64}, 40, 1.0f);
  const auto run = [&](int fill) {
    cuda::set_uncleared_fill(fill);
    const Tensor a = Tensor::for_overwrite(DType::kBF16, {64, 64}, Device::kCuda);
    const Tensor b = Tensor::for_overwrite(DType::kBF16, {64, 64}, Device::kCuda);
    const Tensor unwritten = add_bf16(a, b).to(Device::kCpu);
    const Tensor g = on_gpu(x);
    const Tensor written = add_bf16(g, g).to(Device::kCpu);
    cuda::set_uncleared_fill(-1);
    return std::pair{unwritten, written};
  };
  const auto [unwritten_0, written_0] = run(0x00);
  const auto [unwritten_1, written_1] = run(0x3f);
  EXPECT_FALSE(unwritten_0.bit_equal(unwritten_1)) << "the fills did not reach the kernel";
  EXPECT_TRUE(written_0.bit_equal(written_1));
#endif
}

TEST(CudaOpsTest, LinearDenseMlpAndMoeAreCloseToTheCpu) {
  SPLITCHECK_REQUIRE_GPU();
  const int64_t t = 11, h = 256, inter = 64;
  const float s = 1.0f / std::sqrt(static_cast<float>(h));
  Tensor x = random_bf16({t, h}, 10, 1.0f), x_g = on_gpu(x);
  Tensor w = random_bf16({h, 96}, 11, s), w_g = on_gpu(w);
  Tensor o_cpu = Tensor::zeros(DType::kBF16, {t, 96}), o_gpu = zeros_like(o_cpu, Device::kCuda);
  LinearArgs la{&x, &w, &o_cpu}, lb{&x_g, &w_g, &o_gpu};
  run_variant("linear", "matmul", &la);
  run_variant("linear", "matmul", &lb);
  EXPECT_LE(difference(o_cpu, o_gpu).max_rel, kClose);

  std::vector<Tensor> host, dev;  // expert weights, kept alive
  auto expert = [&](uint64_t seed) {
    host.push_back(random_bf16({h, inter}, seed, s));
    host.push_back(random_bf16({h, inter}, seed + 1, s));
    host.push_back(random_bf16({inter, h}, seed + 2, 1.0f / 8.0f));
  };
  const int n_exp = 8;
  host.reserve(3 * (n_exp + 2) + 1);
  dev.reserve(host.capacity());
  for (int e = 0; e < n_exp + 2; ++e) expert(100 + 10 * e);
  host.push_back(random_bf16({h, n_exp}, 5, s));
  for (const Tensor& t0 : host) dev.push_back(on_gpu(t0));
  auto swiglu = [](std::vector<Tensor>& v, int e) {
    return SwiGluWeights{&v[3 * e], &v[3 * e + 1], &v[3 * e + 2]};
  };
  Tensor m_cpu = Tensor::zeros(DType::kBF16, {t, h}), m_gpu = zeros_like(m_cpu, Device::kCuda);
  DenseMlpArgs da{&x, swiglu(host, 0), &m_cpu}, db{&x_g, swiglu(dev, 0), &m_gpu};
  run_variant("dense_mlp", "swiglu", &da);
  run_variant("dense_mlp", "swiglu", &db);
  EXPECT_LE(difference(m_cpu, m_gpu).max_rel, kClose);

  std::vector<SwiGluWeights> ec, eg, sc, sg;
  for (int e = 0; e < n_exp; ++e) {
    ec.push_back(swiglu(host, e));
    eg.push_back(swiglu(dev, e));
  }
  sc.push_back(swiglu(host, n_exp));
  sg.push_back(swiglu(dev, n_exp));
  Tensor r_cpu = Tensor::zeros(DType::kBF16, {t, h}), r_gpu = zeros_like(r_cpu, Device::kCuda);
  MoeArgs ma{&x, &host.back(), ec, sc, 2, &r_cpu}, mb{&x_g, &dev.back(), eg, sg, 2, &r_gpu};
  run_variant("moe", "grouped", &ma);
  run_variant("moe", "grouped", &mb);
  EXPECT_LE(difference(r_cpu, r_gpu).max_rel, kClose);
}

// Rows [first, first + n) of a host copy of `t`, as bytes.
std::vector<uint8_t> row_bytes(const Tensor& t, int64_t first, int64_t n) {
  const Tensor h = t.on_host();
  const size_t row = h.nbytes() / static_cast<size_t>(h.dim(0));
  const auto* p = static_cast<const uint8_t*>(h.address()) + static_cast<size_t>(first) * row;
  return std::vector<uint8_t>(p, p + static_cast<size_t>(n) * row);
}

// A product of a few rows (the skinny path, up to 8 rows) gives each row the bits it has
// alone, with aligned (vector) and odd (scalar) widths; and the MoE routed on the device
// (up to 64 tokens, 1 to 8 rows a pass) gives every token the bits it has alone.
TEST(CudaOpsTest, AFewRowsProductAndTheMoeGiveARowTheBitsItHasAlone) {
  SPLITCHECK_REQUIRE_GPU();
  for (auto [h, n] : {std::pair<int64_t, int64_t>{512, 768}, {1000, 333}}) {
    Tensor w_g = on_gpu(random_bf16({h, n}, 60 + h, 1.0f / std::sqrt(static_cast<float>(h))));
    Tensor x = random_bf16({16, h}, 61 + n, 1.0f);
    std::vector<std::vector<uint8_t>> alone;
    for (int64_t r = 0; r < 16; ++r) {
      Tensor row = Tensor::zeros(DType::kBF16, {1, h});
      std::copy_n(x.data<bf16>() + r * h, h, row.data<bf16>());
      Tensor row_g = on_gpu(row), o = Tensor::zeros(DType::kBF16, {1, n}, Device::kCuda);
      LinearArgs a{&row_g, &w_g, &o};
      run_variant("linear", "matmul", &a);
      alone.push_back(row_bytes(o, 0, 1));
    }
    for (int64_t m : {2, 3, 5, 8}) {
      Tensor xm = Tensor::zeros(DType::kBF16, {m, h});
      std::copy_n(x.data<bf16>(), m * h, xm.data<bf16>());
      Tensor xm_g = on_gpu(xm), o = Tensor::zeros(DType::kBF16, {m, n}, Device::kCuda);
      LinearArgs a{&xm_g, &w_g, &o};
      run_variant("linear", "matmul", &a);
      for (int64_t r = 0; r < m; ++r)
        EXPECT_EQ(row_bytes(o, r, 1), alone[static_cast<size_t>(r)])
            << "h " << h << " n " << n << ": row " << r << " of " << m;
    }
  }

  // The MoE of `cases` (tokens, with the shared expert) against each token alone, with 8
  // experts of [h, inter]. Small weights (k3-tiny's: 256 x 64) take a block a routed row
  // in any launch (routed_gemm); larger ones (512 x 512) a block an expert, its rows in
  // passes of 4 (11 tokens) or 8 (40 tokens), while each token alone takes a block a row.
  // The shared expert of more than 8 tokens takes the tensor-core kernel or cuBLASLt,
  // whose bits may differ from a row's alone, as the router's product would with another
  // router; so the larger weights are judged without it.
  auto moe_rows_alone = [&](int64_t h, int64_t inter,
                            std::vector<std::pair<int64_t, bool>> cases) {
    const int n_exp = 8;
    const float s = 1.0f / std::sqrt(static_cast<float>(h));
    std::vector<Tensor> dev;
    dev.reserve(3 * (n_exp + 1) + 1);
    for (int e = 0; e < n_exp + 1; ++e) {
      dev.push_back(on_gpu(random_bf16({h, inter}, 300 + 10 * e, s)));
      dev.push_back(on_gpu(random_bf16({h, inter}, 301 + 10 * e, s)));
      dev.push_back(on_gpu(random_bf16({inter, h}, 302 + 10 * e, 1.0f / 8.0f)));
    }
    // The router: one nonzero weight a column (row e of column e), so a logit is one exact
    // product of bf16 values and has the same bits in any order of summing, by cuBLASLt
    // for more than kSkinnyMaxRows tokens as by the skinny kernel for one. Its product's
    // bits are not what this test judges; the routed products' are.
    Tensor router = Tensor::zeros(DType::kBF16, {h, n_exp});
    const Tensor diagonal = random_bf16({n_exp}, 7, 1.0f);
    for (int e = 0; e < n_exp; ++e) router.data<bf16>()[e * n_exp + e] = diagonal.data<bf16>()[e];
    dev.push_back(on_gpu(router));
    std::vector<SwiGluWeights> experts, shared;
    for (int e = 0; e < n_exp; ++e)
      experts.push_back({&dev[3 * e], &dev[3 * e + 1], &dev[3 * e + 2]});
    shared.push_back({&dev[3 * n_exp], &dev[3 * n_exp + 1], &dev[3 * n_exp + 2]});
    const std::vector<SwiGluWeights> none;
    for (auto [tokens, with_shared] : cases) {
      const std::vector<SwiGluWeights>& sh = with_shared ? shared : none;
      Tensor x = random_bf16({tokens, h}, 70 + tokens, 1.0f), x_g = on_gpu(x);
      Tensor all = Tensor::zeros(DType::kBF16, {tokens, h}, Device::kCuda);
      MoeArgs many{&x_g, &dev.back(), experts, sh, 2, &all};
      run_variant("moe", "grouped", &many);
      for (int64_t r = 0; r < tokens; ++r) {
        Tensor row = Tensor::zeros(DType::kBF16, {1, h});
        std::copy_n(x.data<bf16>() + r * h, h, row.data<bf16>());
        Tensor row_g = on_gpu(row), o = Tensor::zeros(DType::kBF16, {1, h}, Device::kCuda);
        MoeArgs one{&row_g, &dev.back(), experts, sh, 2, &o};
        run_variant("moe", "grouped", &one);
        EXPECT_EQ(row_bytes(o, 0, 1), row_bytes(all, r, 1))
            << h << " x " << inter << ": token " << r << " of " << tokens;
      }
    }
  };
  moe_rows_alone(256, 64, {{11, true}, {40, false}});
  moe_rows_alone(512, 512, {{11, false}, {40, false}});
}

#ifdef SPLITCHECK_HAVE_CUDA
// The skinny kernel's product recomputed on the host in the order kernels/cuda/skinny.h
// states: bf16 [m, k] by bf16 [k, n], each output rounded to bf16 once.
std::vector<uint16_t> skinny_order_on_host(const Tensor& x, const Tensor& w) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(1);
  const int64_t kc = cuda::skinny_chunk_rows(n, k);
  const bf16* a = x.data<bf16>();
  const bf16* b = w.data<bf16>();
  std::vector<uint16_t> out(static_cast<size_t>(m * n));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      float total = 0.0f;
      for (int64_t c0 = 0; c0 < k; c0 += kc) {
        const int64_t c1 = std::min(c0 + kc, k);
        float chunk = 0.0f;
        for (int warp = 0; warp < cuda::kSkinnyWarps; ++warp) {
          float acc = 0.0f;
          for (int64_t i = c0 + warp; i < c1; i += cuda::kSkinnyWarps)
            acc = std::fma(to_f32(a[r * k + i]), to_f32(b[i * n + c]), acc);
          chunk = warp == 0 ? acc : chunk + acc;
        }
        total = c0 == 0 ? chunk : total + chunk;
      }
      out[static_cast<size_t>(r * n + c)] = to_bf16(total).bits;
    }
  }
  return out;
}

// A product of 1 to 8 rows on the skinny path has, in every element, the bits of the
// order skinny.h states, recomputed on the host: whole chunks of an aligned weight (the
// loop that checks no row), a short last chunk beside whole ones, an odd width (scalar
// loads), and a weight of many tiles; passes of 1, 2, 4 and 8 rows.
TEST(CudaOpsTest, TheSkinnyProductSumsInItsStatedOrder) {
  SPLITCHECK_REQUIRE_GPU();
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {7168, 512}, {512, 7168}, {300, 256}, {1000, 333}};  // (k, n)
  for (auto [k, n] : shapes) {
    const Tensor w = random_bf16({k, n}, 90 + n, 1.0f / std::sqrt(static_cast<float>(k)));
    const Tensor w_g = on_gpu(w);
    for (int64_t m : {1, 2, 3, 5, 8}) {
      const Tensor x = random_bf16({m, k}, 91 + k + m, 1.0f), x_g = on_gpu(x);
      Tensor o = Tensor::zeros(DType::kBF16, {m, n}, Device::kCuda);
      LinearArgs a{&x_g, &w_g, &o};
      run_variant("linear", "matmul", &a);
      const Tensor got = o.on_host();
      const std::vector<uint16_t> want = skinny_order_on_host(x, w);
      int64_t differ = 0, first = -1;
      for (int64_t i = 0; i < m * n; ++i) {
        if (got.data<bf16>()[i].bits == want[static_cast<size_t>(i)]) continue;
        if (differ++ == 0) first = i;
      }
      EXPECT_EQ(differ, 0) << "k " << k << " n " << n << " m " << m << " (chunks of "
                           << cuda::skinny_chunk_rows(n, k) << " rows): " << differ << " of "
                           << m * n << " elements differ, the first at row " << first / n
                           << " column " << first % n;
    }
  }
}
#endif  // SPLITCHECK_HAVE_CUDA

TEST(CudaOpsTest, MlaKdaAndDenseAttentionAreCloseToTheCpuAndKeepTheirCaches) {
  SPLITCHECK_REQUIRE_GPU();
  const int64_t h = 256, r = 64;
  const int heads = 4, hd = 64;
  const int64_t qd = heads * hd;
  std::vector<Tensor> w;
  w.reserve(16);
  for (auto [in, out, seed] : {std::tuple<int64_t, int64_t, uint64_t>{h, qd, 1},
                               {h, r, 2},
                               {r, qd, 3},
                               {r, qd, 4},
                               {h, qd, 5},
                               {qd, h, 6}})
    w.push_back(random_bf16({in, out}, seed, 1.0f / std::sqrt(static_cast<float>(in))));
  w.push_back(random_bf16({r}, 7, 0.1f, 1.0f));
  std::vector<Tensor> wg;
  for (const Tensor& t0 : w) wg.push_back(on_gpu(t0));
  LatentCache cache_cpu, cache_gpu;
  for (int64_t t : {5, 1, 3}) {  // a prefill, a decode, a verify block: the cache grows
    Tensor x = random_bf16({t, h}, 20 + t, 1.0f), x_g = on_gpu(x);
    Tensor o_cpu = Tensor::zeros(DType::kBF16, {t, h}), o_gpu = zeros_like(o_cpu, Device::kCuda);
    MlaArgs a{&x,    &w[0], &w[1], &w[6], &w[2],      &w[3], &w[4],
              &w[5], heads, hd,    1e-6f, &cache_cpu, &o_cpu};
    MlaArgs b{&x_g,   &wg[0], &wg[1], &wg[6], &wg[2],     &wg[3], &wg[4],
              &wg[5], heads,  hd,     1e-6f,  &cache_gpu, &o_gpu};
    run_variant("mla", "latent_cache", &a);
    run_variant("mla", "latent_cache", &b);
    EXPECT_LE(difference(o_cpu, o_gpu).max_rel, kClose) << "T " << t;
    ASSERT_EQ(cache_cpu.positions, cache_gpu.positions);
    EXPECT_EQ(cache_gpu.rows.device(), Device::kCuda);  // the latents stay on the device
  }

  std::vector<Tensor> k;
  k.reserve(16);
  for (auto [in, out, seed] : {std::tuple<int64_t, int64_t, uint64_t>{h, qd, 31},
                               {h, qd, 32},
                               {h, qd, 33},
                               {h, heads, 34},
                               {h, qd, 35},
                               {h, qd, 36},
                               {qd, h, 38}})
    k.push_back(random_bf16({in, out}, seed, 1.0f / std::sqrt(static_cast<float>(in))));
  k.push_back(random_bf16({hd}, 37, 0.1f, 1.0f));
  std::vector<Tensor> kg;
  for (const Tensor& t0 : k) kg.push_back(on_gpu(t0));
  Tensor st_cpu_t = Tensor::zeros(DType::kF32, {int64_t{heads} * hd * hd});
  Tensor st_gpu_t = Tensor::zeros(DType::kF32, {int64_t{heads} * hd * hd}, Device::kCuda);
  for (int64_t t : {6, 1}) {
    Tensor x = random_bf16({t, h}, 40 + t, 1.0f), x_g = on_gpu(x);
    Tensor o_cpu = Tensor::zeros(DType::kBF16, {t, h}), o_gpu = zeros_like(o_cpu, Device::kCuda);
    KdaArgs a{&x,    &k[0], &k[1], &k[2], &k[3], &k[4],     &k[5],
              &k[7], &k[6], heads, hd,    1e-6f, &st_cpu_t, &o_cpu};
    KdaArgs b{&x_g,   &kg[0], &kg[1], &kg[2], &kg[3], &kg[4],    &kg[5],
              &kg[7], &kg[6], heads,  hd,     1e-6f,  &st_gpu_t, &o_gpu};
    run_variant("kda", "recurrent", &a);
    run_variant("kda", "recurrent", &b);
    EXPECT_LE(difference(o_cpu, o_gpu).max_rel, kClose) << "T " << t;
  }
  const Tensor st_back = st_gpu_t.to(Device::kCpu);
  const std::span<const float> st_cpu = st_cpu_t.span<float>(), st_gpu = st_back.span<float>();
  double max_state = 0.0, max_diff = 0.0;
  for (size_t i = 0; i < st_cpu.size(); ++i) {
    max_state = std::max(max_state, std::fabs(static_cast<double>(st_cpu[i])));
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(st_cpu[i]) - st_gpu[i]));
  }
  EXPECT_GT(max_state, 0.0);
  EXPECT_LE(max_diff, kClose * max_state);

  Tensor q = random_bf16({3, qd}, 50, 1.0f), kk = random_bf16({9, qd}, 51, 1.0f),
         v = random_bf16({9, qd}, 52, 1.0f);
  Tensor q_g = on_gpu(q), k_g = on_gpu(kk), v_g = on_gpu(v);
  Tensor o_cpu = Tensor::zeros(DType::kBF16, {3, qd}), o_gpu = zeros_like(o_cpu, Device::kCuda);
  DenseAttentionArgs a{&q, &kk, &v, heads, hd, &o_cpu, {}, {}, {}},
      b{&q_g, &k_g, &v_g, heads, hd, &o_gpu, {}, {}, {}};
  run_variant("dense_attention", "softmax", &a);
  run_variant("dense_attention", "softmax", &b);
  EXPECT_LE(difference(o_cpu, o_gpu).max_rel, kClose);
}

#ifdef SPLITCHECK_HAVE_CUDA
// A segmented KDA call (5 and 3 tokens, each segment with its own nonzero state) at head
// size hd, on the GPU; returns the output and the two states after the call.
std::vector<Tensor> kda_on_gpu(int hd) {
  const int64_t h = 128;
  const int heads = 2;
  const int64_t qd = heads * hd;
  std::vector<Tensor> w;
  uint64_t seed = 100 + static_cast<uint64_t>(hd);
  for (auto [in, out] : {std::pair<int64_t, int64_t>{h, qd},
                         {h, qd},
                         {h, qd},
                         {h, heads},
                         {h, qd},
                         {h, qd},
                         {qd, h}})
    w.push_back(on_gpu(random_bf16({in, out}, seed++, 1.0f / std::sqrt(static_cast<float>(in)))));
  w.push_back(on_gpu(random_bf16({hd}, seed++, 0.1f, 1.0f)));
  Tensor x = on_gpu(random_bf16({8, h}, seed++, 1.0f));
  Tensor out = Tensor::zeros(DType::kBF16, {8, h}, Device::kCuda);
  // Float32 states from bf16 values: the recurrence starts from a state it did not write.
  Tensor s0 = random_bf16({int64_t{heads} * hd * hd}, seed++, 0.5f);
  Tensor s1 = random_bf16({int64_t{heads} * hd * hd}, seed++, 0.5f);
  auto as_f32 = [](const Tensor& t) {
    Tensor f = Tensor::zeros(DType::kF32, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) f.data<float>()[i] = to_f32(t.data<bf16>()[i]);
    return on_gpu(f);
  };
  Tensor st0 = as_f32(s0), st1 = as_f32(s1);
  const std::vector<int64_t> begin = {0, 5, 8};
  Tensor* states[] = {&st0, &st1};
  KdaArgs a{&x,    &w[0], &w[1], &w[2], &w[3],   &w[4], &w[5], &w[7],
            &w[6], heads, hd,    1e-6f, nullptr, &out,  begin, states};
  run_variant("kda", "recurrent", &a);
  return {out, st0, st1};
}
#endif

// KDA's recurrence keeps the state in registers at head sizes 64 and 128 (two lanes a
// value channel, their quarter sums swapped by a shuffle), and in global memory otherwise
// (one thread a channel): the same quarters summed in the same order, so both instances
// give every output and state the same bits.
TEST(CudaOpsTest, KdaHeadSizeInstancesGiveTheGenericInstancesBits) {
  SPLITCHECK_REQUIRE_GPU();
#ifdef SPLITCHECK_HAVE_CUDA
  for (int hd : {64, 128}) {
    ASSERT_TRUE(cuda::kda_head_size_compiled(hd)) << hd;
    const std::vector<Tensor> fast = kda_on_gpu(hd);
    cuda::kda_force_generic_for_test(true);
    const std::vector<Tensor> generic = kda_on_gpu(hd);
    cuda::kda_force_generic_for_test(false);
    for (size_t i = 0; i < fast.size(); ++i)
      EXPECT_TRUE(fast[i].bit_equal(generic[i])) << "head size " << hd << ", tensor " << i;
    EXPECT_GT(difference(fast[0], Tensor::zeros(DType::kBF16, fast[0].shape())).differing, 0);
  }
  EXPECT_FALSE(cuda::kda_head_size_compiled(96));
#endif
}

}  // namespace
}  // namespace splitcheck
