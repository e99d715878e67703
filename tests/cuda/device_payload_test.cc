// The nccl transport's device path on one GPU (harness/engine/handoff.h's split form): a
// stage computing on the GPU with device payloads on builds its body on the device, and
// header + body are byte for byte the payload the host path encodes; the receiving stage
// reads the device body (sliced on the device) to the same outputs as the host payload;
// a serving step's segments alike.
// The two-rank send itself is measured and byte-checked by nccl_payload_bench
// (scripts/nccl-check.sh). Skipped, saying why, without a GPU.
#include <gtest/gtest.h>

#include "harness/engine/handoff.h"
#include "harness/engine/run.h"
#include "harness/engine/stage.h"
#include "tests/cuda/gpu_test_support.h"
#include "tests/scenario_fixture.h"

namespace splitcheck {
namespace {

std::unique_ptr<Stage> make_stage(const Scenario& s, WeightSource& source, int cut, int index) {
  Result<Partition> part = Partition::from_cuts({cut}, s.model.num_hidden_layers);
  EXPECT_TRUE(part.is_ok());
  StageConfig c{s.model,
                *part,
                index,
                s.capture_ids,
                s.dump_level,
                FaultSet{s.faults},
                s.speculative.method,
                s.speculative.context_only_producer};
  Result<std::unique_ptr<Stage>> st = Stage::create(c, source);
  EXPECT_TRUE(st.is_ok()) << st.status().message();
  return st.is_ok() ? std::move(*st) : nullptr;
}

// A split payload's header and body (copied to the host) joined: the host path's bytes.
std::vector<std::byte> join_body(const std::vector<std::byte>& header, const Tensor& body) {
  const Tensor host = body.to(Device::kCpu);
  std::vector<std::byte> joined = header;
  joined.insert(joined.end(), host.bytes(), host.bytes() + host.nbytes());
  return joined;
}

TEST(CudaDevicePayload, ABodyBuiltOnTheGpuIsTheHostPathsBytesAndReadsTheSame) {
  SPLITCHECK_REQUIRE_GPU();
  Scenario s = committed_scenario("default");
  s.backend = "cuda";
  std::unique_ptr<WeightSource> source = scenario_weight_source(s);
  ForwardRequest req;
  req.ids = {3, 1, 4, 1, 5, 9, 2};
  for (int cut : {1, 5, 15, 31}) {
    if (cut >= s.model.num_hidden_layers) continue;
    std::unique_ptr<Stage> host_sender = make_stage(s, *source, cut, 0);
    std::unique_ptr<Stage> device_sender = make_stage(s, *source, cut, 0);
    std::unique_ptr<Stage> receiver = make_stage(s, *source, cut, 1);
    ASSERT_TRUE(host_sender && device_sender && receiver);
    device_sender->set_device_payloads(true);
    ASSERT_TRUE(device_sender->sends_device_payloads());
    Result<StageOutput> host = host_sender->run(req, nullptr, nullptr, nullptr);
    Result<StageOutput> dev = device_sender->run(req, nullptr, nullptr, nullptr);
    ASSERT_TRUE(host.is_ok() && dev.is_ok());
    ASSERT_TRUE(host->body.empty());
    ASSERT_FALSE(dev->body.empty());
    EXPECT_EQ(dev->body.device(), Device::kCuda);
    const Tensor body_on_host = dev->body.to(Device::kCpu);
    std::vector<std::byte> joined = dev->payload;
    joined.insert(joined.end(), body_on_host.bytes(), body_on_host.bytes() + body_on_host.nbytes());
    EXPECT_EQ(joined, host->payload) << "cut " << cut;

    Result<StageOutput> from_host = receiver->run(req, &host->payload, nullptr, nullptr);
    receiver->reset_sequence();
    Result<StageOutput> from_dev = receiver->run(req, &dev->payload, nullptr, nullptr, &dev->body);
    ASSERT_TRUE(from_host.is_ok()) << from_host.status().message();
    ASSERT_TRUE(from_dev.is_ok()) << from_dev.status().message();
    EXPECT_TRUE(
        from_dev->head.logits.to(Device::kCpu).bit_equal(from_host->head.logits.to(Device::kCpu)))
        << "cut " << cut;
    ASSERT_EQ(from_dev->taps.size(), from_host->taps.size());
    for (size_t i = 0; i < from_dev->taps.size(); ++i)
      EXPECT_TRUE(from_dev->taps[i]
                      .second.to(Device::kCpu)
                      .bit_equal(from_host->taps[i].second.to(Device::kCpu)))
          << "cut " << cut << " tap " << from_dev->taps[i].first;

    // The arrival checks hold on the device too: a body one element short is refused.
    Tensor short_body = dev->body.rows(0, dev->body.numel() - 1);
    receiver->reset_sequence();
    Result<StageOutput> r = receiver->run(req, &dev->payload, nullptr, nullptr, &short_body);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("body of"), std::string::npos) << r.status().message();
  }
}

// A serving step's segments take the same device path (Stage::hand_on_payload): each
// segment's payload split, header + body byte for byte the host path's, and a receiving
// stage reads a step's bodies, side by side, to the same outputs as the host payloads.
TEST(CudaDevicePayload, AServingStepsSegmentsSplitAndReadAsTheHostPathsBytes) {
  SPLITCHECK_REQUIRE_GPU();
  Scenario s = committed_scenario("default");
  s.backend = "cuda";
  std::unique_ptr<WeightSource> source = scenario_weight_source(s);
  BatchRequest step;
  step.segments = {Segment{0, {3, 1, 4, 1, 5}, 0, ForwardKind::kPrefill, 0},
                   Segment{1, {9, 2, 6}, 0, ForwardKind::kPrefill, 1}};
  const size_t n = step.segments.size();
  const int cut = 13;
  std::unique_ptr<Stage> host_sender = make_stage(s, *source, cut, 0);
  std::unique_ptr<Stage> device_sender = make_stage(s, *source, cut, 0);
  std::unique_ptr<Stage> host_receiver = make_stage(s, *source, cut, 1);
  std::unique_ptr<Stage> device_receiver = make_stage(s, *source, cut, 1);
  ASSERT_TRUE(host_sender && device_sender && host_receiver && device_receiver);
  device_sender->set_device_payloads(true);
  std::vector<DispatchTrace> traces(n);
  Result<std::vector<StageOutput>> host = host_sender->run_batch(step, {}, {}, nullptr, traces);
  Result<std::vector<StageOutput>> dev = device_sender->run_batch(step, {}, {}, nullptr, traces);
  ASSERT_TRUE(host.is_ok()) << host.status().message();
  ASSERT_TRUE(dev.is_ok()) << dev.status().message();
  std::vector<std::vector<std::byte>> host_payloads, headers;
  std::vector<Tensor> bodies;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE((*host)[i].body.empty());
    ASSERT_FALSE((*dev)[i].body.empty()) << "segment " << i;
    EXPECT_EQ((*dev)[i].body.device(), Device::kCuda);
    EXPECT_EQ(join_body((*dev)[i].payload, (*dev)[i].body), (*host)[i].payload) << "segment " << i;
    host_payloads.push_back((*host)[i].payload);
    headers.push_back((*dev)[i].payload);
    bodies.push_back((*dev)[i].body);
  }
  Result<std::vector<StageOutput>> from_host =
      host_receiver->run_batch(step, host_payloads, {}, nullptr, traces);
  Result<std::vector<StageOutput>> from_dev =
      device_receiver->run_batch(step, headers, bodies, nullptr, traces);
  ASSERT_TRUE(from_host.is_ok()) << from_host.status().message();
  ASSERT_TRUE(from_dev.is_ok()) << from_dev.status().message();
  for (size_t i = 0; i < n; ++i)
    EXPECT_TRUE((*from_dev)[i]
                    .head.logits.to(Device::kCpu)
                    .bit_equal((*from_host)[i].head.logits.to(Device::kCpu)))
        << "segment " << i;

  // The arrival checks hold for a segment's body too: one element short is refused.
  std::unique_ptr<Stage> checker = make_stage(s, *source, cut, 1);
  ASSERT_TRUE(checker);
  bodies[1] = bodies[1].rows(0, bodies[1].numel() - 1);
  Result<std::vector<StageOutput>> r = checker->run_batch(step, headers, bodies, nullptr, traces);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("body of"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace splitcheck
