// Checkpoint I/O (SPEC 2.1): one HDF5 dataset per tensor name at the file's root, bf16
// stored as uint16 with attribute dtype = "bfloat16". Written to a temporary name and
// renamed, so a failed write leaves nothing at the final path.
#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "reference/partial_files.h"
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

// An HDF5 identifier of the writer: every call on it is checked, and so is its close.
// An identifier that was not closed explicitly (an error path) is closed on scope exit,
// unchecked, since the write has already failed.
class WriteHandle {
 public:
  WriteHandle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  WriteHandle(const WriteHandle&) = delete;
  WriteHandle& operator=(const WriteHandle&) = delete;
  ~WriteHandle() {
    if (id_ >= 0) close_(id_);
  }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; false when HDF5 reports an error (for a file: data not flushed).
  bool close() {
    const herr_t rc = close_(std::exchange(id_, H5I_INVALID_HID));
    return rc >= 0;
  }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

Status write_string_attr(hid_t obj, const char* name, const std::string& value,
                         const std::string& where) {
  const auto fail = [&] {
    return internal_error(where + ": cannot write attribute " + std::string(name));
  };
  WriteHandle type(H5Tcopy(H5T_C_S1), H5Tclose);
  if (!type.valid() || H5Tset_size(type.get(), std::max<size_t>(value.size(), 1)) < 0 ||
      H5Tset_cset(type.get(), H5T_CSET_UTF8) < 0)
    return fail();
  WriteHandle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (!space.valid()) return fail();
  WriteHandle attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                   H5Aclose);
  if (!attr.valid() || H5Awrite(attr.get(), type.get(), value.data()) < 0) return fail();
  if (!attr.close() || !space.close() || !type.close()) return fail();
  return Status::ok();
}

// Writes the whole checkpoint into `tmp`, checking every HDF5 call, every close included;
// `path` is the final name, used in messages.
Status write_checkpoint_file(const std::string& tmp, const std::string& path,
                             const ModelConfig& config, const WeightStore& weights) {
  const auto fail = [&](const std::string& what) {
    return internal_error(path + ": " + what + " (writing " + tmp + ")");
  };
  WriteHandle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  WriteHandle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  WriteHandle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  // No object times anywhere (the root group included): equal weights give equal bytes.
  // A semi close degree makes H5Fclose fail, rather than linger, if anything is left open.
  if (!fapl.valid() || !fcpl.valid() || !dcpl.valid() ||
      H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18) < 0 ||
      H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_SEMI) < 0 ||
      H5Pset_obj_track_times(fcpl.get(), false) < 0 ||
      H5Pset_obj_track_times(dcpl.get(), false) < 0)
    return fail("cannot set file properties");
  WriteHandle file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), H5Fclose);
  if (!file.valid()) return invalid_input(path + ": cannot create checkpoint file " + tmp);
  {
    WriteHandle root(H5Gopen2(file.get(), "/", H5P_DEFAULT), H5Gclose);
    if (!root.valid()) return fail("cannot open the root group");
    RETURN_IF_ERROR(write_string_attr(root.get(), "format", "splitcheck.checkpoint", path));
    RETURN_IF_ERROR(write_string_attr(root.get(), "model", config.preset, path));
    for (const auto& [name, stored] : weights.tensors()) {
      const Tensor t = stored.on_host();
      const std::string where = path + ": dataset " + name;
      std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
      WriteHandle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                        H5Sclose);
      if (!space.valid()) return fail("cannot describe the shape of dataset " + name);
      WriteHandle ds(H5Dcreate2(root.get(), name.c_str(), H5T_STD_U16LE, space.get(), H5P_DEFAULT,
                                dcpl.get(), H5P_DEFAULT),
                     H5Dclose);
      if (!ds.valid()) return fail("cannot create dataset " + name);
      if (t.numel() > 0 && (t.empty() || H5Dwrite(ds.get(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL,
                                                  H5P_DEFAULT, t.data<uint16_t>()) < 0))
        return fail("cannot write dataset " + name);
      RETURN_IF_ERROR(write_string_attr(ds.get(), "dtype", "bfloat16", where));
      if (!ds.close() || !space.close()) return fail("cannot close dataset " + name);
    }
    if (!root.close()) return fail("cannot close the root group");
  }
  if (!dcpl.close() || !fcpl.close() || !fapl.close()) return fail("cannot close properties");
  if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0 || !file.close())
    return fail("cannot flush and close the file");
  return Status::ok();
}

}  // namespace

Status write_checkpoint(const std::string& path, const ModelConfig& config,
                        const WeightStore& weights) {
  quiet_hdf5();
  const std::string tmp = path + ".partial";
  const PartialFile removed_on_interrupt(tmp);
  std::error_code ec;
  Status written = write_checkpoint_file(tmp, path, config, weights);
  pause_midway_for_test();
  H5Eclear2(H5E_DEFAULT);
  if (!written.is_ok()) {
    std::filesystem::remove(tmp, ec);
    return written;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    return invalid_input(path + ": cannot rename checkpoint " + tmp + " to it: " + why);
  }
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
