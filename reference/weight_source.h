// Where engines load weights from, by name. A stage asks only for what it holds.
//
// Every load gives the caller storage of its own: each engine and each stage owns what it
// loaded, so a stage's measured parameter bytes are what it really holds (SPEC 5.4) and
// two stages never share a buffer. GeneratedWeights memoises generated tensors so that
// many engines of one sweep do not regenerate them (generation is a pure function of seed,
// name and index, so a memoised tensor equals a fresh one bit for bit); a load copies the
// memoised bytes. CheckpointWeights reads an HDF5 checkpoint.
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
};

class GeneratedWeights : public WeightSource {
 public:
  // Tensors are generated on `device` (kCuda: on the GPU) and loaded there.
  explicit GeneratedWeights(ModelConfig config, Device device = Device::kCpu)
      : config_(std::move(config)), device_(device) {}
  Result<Tensor> load(const std::string& name) override;

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

 private:
  std::string path_;
  ModelConfig config_;
  Device device_ = Device::kCpu;
  std::mutex mu_;
};

// Loads the named tensors into a store.
Result<WeightStore> load_weights(WeightSource& source, const std::vector<std::string>& names);

}  // namespace splitcheck
