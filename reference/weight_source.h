// Where engines load weights from, by name. A stage asks only for what it holds.
//
// Two ways to get a tensor. load() gives the caller storage of its own (a stage's boundary
// copies, SPEC 2.6). view() gives the source's own copy, shared with every other view of
// that name: the PP=1 engine and every stage of every partition of a sweep only read their
// weights, so on one device they all hold views of one copy of the model, never a second
// (a k3-shape model is 79.5 GiB of bf16: two copies do not fit one H200). Each stage still
// holds exactly the tensors the placement rule gives it, under its own names, and measures
// the bytes of what it holds (SPEC 5.4). GeneratedWeights memoises generated tensors
// (generation is a pure function of seed, name and index, so a memoised tensor equals a
// fresh one bit for bit); CheckpointWeights reads an HDF5 checkpoint and keeps what was
// viewed.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "reference/weights.h"

namespace splitcheck {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The tensor `name` of the model, in storage the caller owns alone; an error names it
  // when the source lacks it.
  virtual Result<Tensor> load(const std::string& name) = 0;
  // The tensor `name`, for a holder that only reads it: the source's copy, shared with
  // every other view of it (the same storage). By default a load.
  virtual Result<Tensor> view(const std::string& name) { return load(name); }
};

class GeneratedWeights : public WeightSource {
 public:
  // Tensors are generated on `device` (kCuda: on the GPU) and loaded there.
  explicit GeneratedWeights(ModelConfig config, Device device = Device::kCpu)
      : config_(std::move(config)), device_(device) {}
  Result<Tensor> load(const std::string& name) override;
  Result<Tensor> view(const std::string& name) override;

 private:
  ModelConfig config_;
  Device device_ = Device::kCpu;
  std::mutex mu_;
  std::map<std::string, Tensor> cache_;
};

class CheckpointWeights : public WeightSource {
 public:
  // Tensors are read on the host and loaded onto `device`.
  CheckpointWeights(std::string path, ModelConfig config, Device device = Device::kCpu)
      : path_(std::move(path)), config_(std::move(config)), device_(device) {}
  Result<Tensor> load(const std::string& name) override;
  Result<Tensor> view(const std::string& name) override;

 private:
  std::string path_;
  ModelConfig config_;
  Device device_ = Device::kCpu;
  std::mutex mu_;
  std::map<std::string, Tensor> viewed_;  // what view() read, kept for the next view
};

// The named tensors as views (WeightSource::view): a store that shares the source's
// storage, for an engine or a stage that only reads its weights.
Result<WeightStore> load_weights(WeightSource& source, const std::vector<std::string>& names);

}  // namespace splitcheck
