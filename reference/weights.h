// Weights of K3-mini: tensor names and shapes (SPEC 2.1), deterministic generation, and
// a name-keyed store. Layouts chosen here (SPEC leaves them open): linear weights are
// [in, out]; embed_tokens and lm_head are [V, H] as SPEC states.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/status.h"
#include "kernels/tensor.h"
#include "reference/config.h"

namespace splitcheck {

// How a tensor's values are drawn: value = scale * u (+ 1 for kOnePlus), u uniform in
// [-1, 1) from a counter-based generator keyed by (seed, name, element index).
// kMarkovW1/kMarkovW2 are derived from other generated tensors (reference/dspark.h).
// kSuccessorTied (lm_head only): the uniform draw plus `scale` times the embedding row of
// the token's predecessor under successor_permutation (see lm_head_successor_tie).
enum class WeightInit { kUniform, kOnePlus, kMarkovW1, kMarkovW2, kSuccessorTied };

struct TensorSpec {
  std::string name;
  Shape shape;
  WeightInit init = WeightInit::kUniform;
  float scale = 1.0f;
};

// Every tensor of the target model, in a fixed order (embedding, layers, output).
std::vector<TensorSpec> model_tensor_specs(const ModelConfig& config);
// The tensors of layer l only.
std::vector<TensorSpec> layer_tensor_specs(const ModelConfig& config, int l);
// The spec of one named tensor of the target model; nullopt for an unknown name.
std::optional<TensorSpec> find_tensor_spec(const ModelConfig& config, const std::string& name);

// The value at `index` of a generated tensor: a pure function of (seed, name, index).
float generated_value(uint64_t seed, const TensorSpec& spec, int64_t index);
// A whole generated tensor (bf16) of a free (kUniform, kOnePlus) spec.
Tensor generate_tensor(uint64_t seed, const TensorSpec& spec);
// Any generated tensor of the model, derived ones included.
Tensor generate_model_tensor(const ModelConfig& config, const TensorSpec& spec);
// The same tensor on `device`: on kCuda the free and successor-tied tensors are computed
// on the GPU by the same pure function of (seed, name, index), bit for bit the CPU's
// (tests/cuda); the derived drafter factors are computed on the host and copied.
Tensor generate_model_tensor(const ModelConfig& config, const TensorSpec& spec, Device device);

// The target's preferred successor of every token: a permutation of [0, V) drawn from
// the model seed (tokens sorted by a seeded hash). lm_head.weight ties row succ[t] to
// embed_tokens row t, so the target tends to continue t with succ[t] (SPEC 3.3: the
// weights make the target predictable enough for acceptance to be meaningful).
std::vector<int32_t> successor_permutation(const ModelConfig& config);

// Name -> tensor: what an engine or a stage holds. The store keeps what it holds alive: an
// owned tensor (WeightSource::load) or a shared view of a source's copy (WeightSource::view)
// is kept as it is; a borrowed tensor is copied into owned storage. Parameter bytes are
// measured from the storage held, not derived from names or shapes.
class WeightStore {
 public:
  void put(const std::string& name, Tensor t);
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // The tensor or nullptr.
  const Tensor* find(const std::string& name) const;
  // The tensor; throws std::out_of_range naming it when absent (a bug, not a user error:
  // loading already refused missing tensors).
  const Tensor& get(const std::string& name) const;
  // The bytes of the distinct storages the store holds (two names over one buffer count
  // it once).
  size_t parameter_bytes() const;
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  // Where the held tensors are (the first one's device; kCpu when empty).
  Device device() const {
    return tensors_.empty() ? Device::kCpu : tensors_.begin()->second.device();
  }

 private:
  std::map<std::string, Tensor> tensors_;
};

// The bytes of the distinct storages the stores hold together: what they occupy on their
// device (a storage viewed by several stores counts once).
size_t distinct_storage_bytes(const std::vector<const WeightStore*>& stores);

// Whether `a` and `b` are the same object: the same storage, compared as such (SPEC 5.4).
// A clone with equal values is not the same object.
bool same_storage(const Tensor& a, const Tensor& b);

// Generates the named tensors (all of them when names is empty).
Result<WeightStore> generate_weights(const ModelConfig& config,
                                     const std::vector<std::string>& names = {});

// Checkpoint I/O (HDF5, one dataset per tensor name; bf16 as uint16 with dtype attribute).
Status write_checkpoint(const std::string& path, const ModelConfig& config,
                        const WeightStore& weights);
// Loads the named tensors; a missing or mis-shaped tensor is an error naming it and the file.
Result<WeightStore> load_checkpoint(const std::string& path, const ModelConfig& config,
                                    const std::vector<std::string>& names);
// Loads one tensor of the given shape into `out` (used for boundary copies).
Status load_checkpoint_tensor(const std::string& path, const std::string& name, const Shape& shape,
                              Tensor& out);

}  // namespace splitcheck
