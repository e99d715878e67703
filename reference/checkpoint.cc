// Checkpoint I/O (SPEC 2.1): one HDF5 dataset per tensor name at the file's root, bf16
// stored as uint16 with attribute dtype = "bfloat16". Written to a temporary name and
// renamed, so a failed write leaves nothing at the final path.
#include <hdf5.h>

#include <cstdio>
#include <filesystem>

#include "reference/weights.h"

namespace splitcheck {
namespace {

// Closes an HDF5 handle on scope exit.
struct H5Handle {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;
  H5Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~H5Handle() {
    if (id >= 0 && close) close(id);
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
};

void quiet_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

Status write_string_attr(hid_t obj, const char* name, const std::string& value) {
  H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id, value.size());
  H5Tset_cset(type.id, H5T_CSET_UTF8);
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle attr(H5Acreate2(obj, name, type.id, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (attr.id < 0 || H5Awrite(attr.id, type.id, value.data()) < 0)
    return internal_error(std::string("cannot write attribute ") + name);
  return Status::ok();
}

}  // namespace

Status write_checkpoint(const std::string& path, const ModelConfig& config,
                        const WeightStore& weights) {
  quiet_hdf5();
  const std::string tmp = path + ".partial";
  {
    H5Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    H5Pset_libver_bounds(fapl.id, H5F_LIBVER_V18, H5F_LIBVER_V18);
    // No object times anywhere (the root group included): equal weights give equal bytes.
    H5Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
    H5Pset_obj_track_times(fcpl.id, false);
    H5Handle file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl.id, fapl.id), H5Fclose);
    if (file.id < 0) return invalid_input(path + ": cannot create checkpoint file");
    H5Handle root(H5Gopen2(file.id, "/", H5P_DEFAULT), H5Gclose);
    RETURN_IF_ERROR(write_string_attr(root.id, "format", "splitcheck.checkpoint"), path);
    RETURN_IF_ERROR(write_string_attr(root.id, "model", config.preset), path);
    H5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_obj_track_times(dcpl.id, false);
    for (const auto& [name, t] : weights.tensors()) {
      std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
      H5Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                     H5Sclose);
      H5Handle ds(H5Dcreate2(root.id, name.c_str(), H5T_STD_U16LE, space.id, H5P_DEFAULT, dcpl.id,
                             H5P_DEFAULT),
                  H5Dclose);
      if (ds.id < 0 || H5Dwrite(ds.id, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                t.data<uint16_t>()) < 0) {
        std::remove(tmp.c_str());
        return internal_error(path + ": cannot write dataset " + name);
      }
      RETURN_IF_ERROR(write_string_attr(ds.id, "dtype", "bfloat16"), path + ": " + name);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return internal_error(path + ": cannot rename checkpoint: " + ec.message());
  return Status::ok();
}

namespace {

Status read_tensor(hid_t file, const std::string& path, const std::string& name, const Shape& shape,
                   Tensor& out) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0)
    return invalid_input(path + ": checkpoint lacks tensor '" + name + "'");
  H5Handle ds(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (ds.id < 0) return invalid_input(path + ": cannot open tensor '" + name + "'");
  H5Handle space(H5Dget_space(ds.id), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.id);
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
  Shape got(dims.begin(), dims.end());
  if (got != shape)
    return invalid_input(path + ": tensor '" + name + "' has shape " + shape_string(got) +
                         ", expected " + shape_string(shape));
  H5Handle type(H5Dget_type(ds.id), H5Tclose);
  if (H5Tget_class(type.id) != H5T_INTEGER || H5Tget_size(type.id) != 2)
    return invalid_input(path + ": tensor '" + name + "' is not stored as bfloat16 (uint16)");
  out = Tensor::zeros(DType::kBF16, shape);
  if (H5Dread(ds.id, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data<uint16_t>()) < 0)
    return invalid_input(path + ": cannot read tensor '" + name + "' (truncated file?)");
  return Status::ok();
}

Result<hid_t> open_checkpoint(const std::string& path) {
  quiet_hdf5();
  if (!std::filesystem::is_regular_file(path)) return invalid_input(path + ": no such file");
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) return invalid_input(path + ": not a readable HDF5 file");
  return file;
}

}  // namespace

Status load_checkpoint_tensor(const std::string& path, const std::string& name, const Shape& shape,
                              Tensor& out) {
  ASSIGN_OR_RETURN(hid_t fid, open_checkpoint(path));
  H5Handle file(fid, H5Fclose);
  return read_tensor(file.id, path, name, shape, out);
}

Result<WeightStore> load_checkpoint(const std::string& path, const ModelConfig& config,
                                    const std::vector<std::string>& names) {
  ASSIGN_OR_RETURN(hid_t fid, open_checkpoint(path));
  H5Handle file(fid, H5Fclose);
  WeightStore store;
  std::vector<std::string> all;
  if (names.empty()) {
    for (const TensorSpec& s : model_tensor_specs(config)) all.push_back(s.name);
  }
  for (const std::string& name : names.empty() ? all : names) {
    std::optional<TensorSpec> spec = find_tensor_spec(config, name);
    if (!spec) return invalid_input("no tensor named '" + name + "' in model " + config.preset);
    Tensor t;
    RETURN_IF_ERROR(read_tensor(file.id, path, name, spec->shape, t));
    store.put(name, std::move(t));
  }
  return store;
}

}  // namespace splitcheck
