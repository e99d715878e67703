#include "reference/weight_source.h"

namespace splitcheck {

Result<Tensor> GeneratedWeights::load(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(name);
    if (it != cache_.end()) return it->second.clone();
  }
  std::optional<TensorSpec> spec = find_tensor_spec(config_, name);
  if (!spec) return invalid_input("no tensor named '" + name + "' in model " + config_.preset);
  Tensor t = generate_model_tensor(config_, *spec, device_);
  std::lock_guard<std::mutex> lock(mu_);
  cache_.emplace(name, t);
  return t.clone();
}

Result<Tensor> CheckpointWeights::load(const std::string& name) {
  std::optional<TensorSpec> spec = find_tensor_spec(config_, name);
  if (!spec) return invalid_input("no tensor named '" + name + "' in model " + config_.preset);
  std::lock_guard<std::mutex> lock(mu_);  // the serial HDF5 library is not thread-safe
  Tensor t;
  RETURN_IF_ERROR(load_checkpoint_tensor(path_, name, spec->shape, t));
  return device_ == Device::kCpu ? t : t.to(device_);
}

Result<WeightStore> load_weights(WeightSource& source, const std::vector<std::string>& names) {
  WeightStore store;
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(Tensor t, source.load(name));
    store.put(name, std::move(t));
  }
  return store;
}

}  // namespace splitcheck
