#include "reference/weight_source.h"

namespace splitcheck {

Result<Tensor> GeneratedWeights::load(const std::string& name) {
  ASSIGN_OR_RETURN(Tensor t, view(name));
  return t.clone();
}

Result<Tensor> GeneratedWeights::view(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(name);
    if (it != cache_.end()) return it->second;
  }
  std::optional<TensorSpec> spec = find_tensor_spec(config_, name);
  if (!spec) return invalid_input("no tensor named '" + name + "' in model " + config_.preset);
  Tensor t = generate_model_tensor(config_, *spec, device_);
  std::lock_guard<std::mutex> lock(mu_);
  // Two threads may have generated it at once: the first one kept is every view's.
  return cache_.emplace(name, std::move(t)).first->second;
}

Result<Tensor> CheckpointWeights::load(const std::string& name) {
  std::optional<TensorSpec> spec = find_tensor_spec(config_, name);
  if (!spec) return invalid_input("no tensor named '" + name + "' in model " + config_.preset);
  std::lock_guard<std::mutex> lock(mu_);  // the serial HDF5 library is not thread-safe
  Tensor t;
  RETURN_IF_ERROR(load_checkpoint_tensor(path_, name, spec->shape, t));
  return device_ == Device::kCpu ? t : t.to(device_);
}

Result<Tensor> CheckpointWeights::view(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = viewed_.find(name);
    if (it != viewed_.end()) return it->second;
  }
  ASSIGN_OR_RETURN(Tensor t, load(name));
  std::lock_guard<std::mutex> lock(mu_);
  return viewed_.emplace(name, std::move(t)).first->second;
}

Result<WeightStore> load_weights(WeightSource& source, const std::vector<std::string>& names) {
  WeightStore store;
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(Tensor t, source.view(name));
    store.put(name, std::move(t));
  }
  return store;
}

}  // namespace splitcheck
