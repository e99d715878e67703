#include "harness/dump/dump.h"

#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <mutex>
#include <new>
#include <system_error>
#include <type_traits>

#include "harness/dump/digest.h"
#include "harness/dump/printable.h"

namespace splitcheck {

static_assert(std::is_same_v<hid_t, int64_t>, "dump.h stores hid_t as int64_t (HDF5 >= 1.10)");

namespace {

// HDF5 built without thread safety must see one caller at a time; a thread-safe build
// locks internally and this lock is a no-op.
struct Hdf5Lock {
#ifdef H5_HAVE_THREADSAFE
  Hdf5Lock() { quiet(); }
#else
  Hdf5Lock() : guard(mutex()) { quiet(); }
  static std::recursive_mutex& mutex() {
    static std::recursive_mutex m;
    return m;
  }
  std::lock_guard<std::recursive_mutex> guard;
#endif
  // HDF5 prints its error stack to stderr by default; we report through Status instead.
  // The setting is per thread in a thread-safe build, so it is applied on every entry.
  static void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};

// The most specific message on HDF5's error stack (then cleared), e.g.
// "truncated file: eof = 1024, sblock->base_addr = 0, stored_eof = 4096".
std::string hdf5_detail() {
  std::string detail;
  auto walk = [](unsigned n, const H5E_error2_t* err, void* data) -> herr_t {
    auto* out = static_cast<std::string*>(data);
    if (n == 0 && err->desc != nullptr && err->desc[0] != '\0') *out = err->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk, &detail);
  H5Eclear2(H5E_DEFAULT);
  return detail.empty() ? std::string() : " (HDF5: " + detail + ")";
}

// Owns one HDF5 identifier and closes it with the matching H5?close.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0) {
      // H5Oclose closes groups, datasets and named types; the rest have their own.
      switch (H5Iget_type(id_)) {
        case H5I_FILE:
          H5Fclose(id_);
          break;
        case H5I_GROUP:
        case H5I_DATASET:
          H5Oclose(id_);
          break;
        case H5I_DATATYPE:
          H5Tclose(id_);
          break;
        case H5I_DATASPACE:
          H5Sclose(id_);
          break;
        case H5I_ATTR:
          H5Aclose(id_);
          break;
        case H5I_GENPROP_LST:
          H5Pclose(id_);
          break;
        default:
          break;
      }
    }
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// "/a/b" from "a/b", "/a/b/", "//a//b"; empty when a component is "." or "..".
std::string normalize_path(const std::string& path) {
  std::string out;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) {
      std::string part = path.substr(i, j - i);
      if (part == "." || part == "..") return {};
      out += "/" + part;
    }
    i = j;
  }
  return out.empty() ? "/" : out;
}

std::string parent_of(const std::string& normalized) {
  size_t slash = normalized.rfind('/');
  return slash == 0 ? "/" : normalized.substr(0, slash);
}

// IEEE float16, little-endian, as h5py stores numpy's float16 (HDF5 1.10 predefines none):
// sign bit 15, exponent bits 10-14 (bias 15), mantissa bits 0-9.
hid_t half_type() {
  static const hid_t type = [] {
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    H5Tlock(t);
    return t;
  }();
  return type;
}

// How a dtype's elements are typed in HDF5: in the file, and in memory.
struct Hdf5Types {
  hid_t file;
  hid_t memory;
};

Hdf5Types hdf5_types(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return {half_type(), half_type()};
    case DType::kBF16:
      return {H5T_STD_U16LE, H5T_NATIVE_UINT16};
    case DType::kF32:
      return {H5T_IEEE_F32LE, H5T_NATIVE_FLOAT};
    case DType::kI32:
      return {H5T_STD_I32LE, H5T_NATIVE_INT32};
  }
  return {H5T_STD_U16LE, H5T_NATIVE_UINT16};
}

hid_t file_type(DType dtype) { return hdf5_types(dtype).file; }
hid_t memory_type(DType dtype) { return hdf5_types(dtype).memory; }

std::string utc_now_iso() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A scalar fixed-length UTF-8 string attribute (null-terminated, length + 1 bytes):
// byte-deterministic, unlike variable-length strings whose heap layout can vary.
herr_t write_string_attr(hid_t obj, const std::string& name, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1));
  if (!type.valid() || H5Tset_size(type.get(), value.size() + 1) < 0 ||
      H5Tset_strpad(type.get(), H5T_STR_NULLTERM) < 0 || H5Tset_cset(type.get(), H5T_CSET_UTF8) < 0)
    return -1;
  Handle space(H5Screate(H5S_SCALAR));
  if (H5Aexists(obj, name.c_str()) > 0 && H5Adelete(obj, name.c_str()) < 0) return -1;
  Handle attr(H5Acreate2(obj, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.valid()) return -1;
  return H5Awrite(attr.get(), type.get(), value.c_str());
}

herr_t write_numeric_attr(hid_t obj, const std::string& name, hid_t file_t, hid_t mem_t,
                          const void* value) {
  Handle space(H5Screate(H5S_SCALAR));
  if (H5Aexists(obj, name.c_str()) > 0 && H5Adelete(obj, name.c_str()) < 0) return -1;
  Handle attr(H5Acreate2(obj, name.c_str(), file_t, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.valid()) return -1;
  return H5Awrite(attr.get(), mem_t, value);
}

std::string type_description(hid_t type) {
  H5T_class_t cls = H5Tget_class(type);
  size_t size = H5Tget_size(type);
  std::string kind = cls == H5T_INTEGER  ? (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int")
                     : cls == H5T_FLOAT  ? "float"
                     : cls == H5T_STRING ? "string"
                                         : "class " + std::to_string(static_cast<int>(cls));
  return kind + std::to_string(size * 8);
}

// The bytes an attribute's value occupies (elements x element size), or why it may not be
// read: a size past kMaxAttributeBytes (or one whose product overflows) is refused
// before anything is allocated for it.
Result<size_t> attribute_bytes(hid_t type, hid_t space, const std::string& name) {
  const hssize_t points = H5Sget_simple_extent_npoints(space);
  const size_t size = H5Tget_size(type);
  if (points < 0 || size == 0)
    return invalid_input("attribute " + name + ": invalid datatype or dataspace" + hdf5_detail());
  const size_t n = static_cast<size_t>(points);
  if (n != 0 && size > kMaxAttributeBytes / n)
    return invalid_input("attribute " + name + " declares " + std::to_string(n) + " x " +
                         std::to_string(size) + " bytes, more than the " +
                         std::to_string(kMaxAttributeBytes >> 20) +
                         " MiB a dump attribute may hold");
  return n * size;
}

// An attribute opened with its type and dataspace.
struct OpenAttribute {
  Handle attr, type, space;
};

// Opens attribute `name` of `obj`; an error when it is missing or cannot be opened.
Result<OpenAttribute> open_attribute(hid_t obj, const std::string& name) {
  htri_t exists = H5Aexists(obj, name.c_str());
  if (exists < 0) return invalid_input("cannot look up attribute " + name + hdf5_detail());
  if (exists == 0) return invalid_input("missing attribute " + name);
  OpenAttribute a;
  a.attr = Handle(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
  a.type = Handle(H5Aget_type(a.attr.get()));
  a.space = Handle(H5Aget_space(a.attr.get()));
  if (!a.attr.valid() || !a.type.valid() || !a.space.valid())
    return invalid_input("cannot open attribute " + name + hdf5_detail());
  return a;
}

// Reads attribute `name` of `obj`. Errors are plain descriptions; callers add the file
// and object.
Result<std::string> read_string_attr(hid_t obj, const std::string& name) {
  ASSIGN_OR_RETURN(OpenAttribute opened, open_attribute(obj, name));
  const Handle& attr = opened.attr;
  const Handle& type = opened.type;
  const Handle& space = opened.space;
  if (H5Tget_class(type.get()) != H5T_STRING)
    return invalid_input("attribute " + name + " is not a string");
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    return invalid_input("attribute " + name + " is not a single string");
  ASSIGN_OR_RETURN(size_t size, attribute_bytes(type.get(), space.get(), name));
  htri_t is_vlen = H5Tis_variable_str(type.get());
  if (is_vlen < 0) return invalid_input("cannot inspect attribute " + name + hdf5_detail());
  if (is_vlen > 0) {
    Handle mem(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    char* p = nullptr;
    if (H5Aread(attr.get(), mem.get(), &p) < 0)
      return invalid_input("cannot read attribute " + name + hdf5_detail());
    std::string s = p ? std::string(p) : std::string();
    if (p) H5free_memory(p);
    return s;
  }
  std::string s(size, '\0');
  if (H5Aread(attr.get(), type.get(), s.data()) < 0)
    return invalid_input("cannot read attribute " + name + hdf5_detail());
  size_t nul = s.find('\0');
  if (nul != std::string::npos) s.resize(nul);
  while (!s.empty() && s.back() == ' ') {  // H5T_STR_SPACEPAD from other writers
    if (H5Tget_strpad(type.get()) != H5T_STR_SPACEPAD) break;
    s.pop_back();
  }
  return s;
}

// The strings of a string attribute of `n` items, `bytes` in all (fixed or variable length).
Result<std::vector<std::string>> read_string_items(hid_t attr, hid_t type, size_t n, size_t bytes,
                                                   const std::string& name) {
  std::vector<std::string> items;
  htri_t is_vlen = H5Tis_variable_str(type);
  if (is_vlen < 0) return invalid_input("cannot inspect attribute " + name + hdf5_detail());
  if (is_vlen > 0) {
    Handle mem(H5Tcopy(H5T_C_S1));
    if (!mem.valid() || H5Tset_size(mem.get(), H5T_VARIABLE) < 0)
      return invalid_input("cannot read attribute " + name + hdf5_detail());
    H5Tset_cset(mem.get(), H5Tget_cset(type));
    std::vector<char*> ptrs(n, nullptr);
    if (H5Aread(attr, mem.get(), ptrs.data()) < 0)
      return invalid_input("cannot read attribute " + name + hdf5_detail());
    size_t total = 0;
    for (char* p : ptrs) {
      const size_t len = p ? std::strlen(p) : 0;
      total += len;
      if (total <= kMaxAttributeBytes) items.emplace_back(p ? p : "", len);
      if (p) H5free_memory(p);
    }
    if (total > kMaxAttributeBytes)
      return invalid_input("attribute " + name + " holds more than the " +
                           std::to_string(kMaxAttributeBytes >> 20) +
                           " MiB a dump attribute may hold");
  } else {
    const size_t size = H5Tget_size(type);
    std::string buf(bytes, '\0');
    if (H5Aread(attr, type, buf.data()) < 0)
      return invalid_input("cannot read attribute " + name + hdf5_detail());
    const bool space_pad = H5Tget_strpad(type) == H5T_STR_SPACEPAD;
    for (size_t i = 0; i < n; ++i) {
      std::string item = buf.substr(i * size, size);
      if (size_t nul = item.find('\0'); nul != std::string::npos) item.resize(nul);
      while (space_pad && !item.empty() && item.back() == ' ') item.pop_back();
      items.push_back(std::move(item));
    }
  }
  return items;
}

// Any attribute's value as AttributeValue: strings (fixed or variable length, scalar or
// array) as themselves, integers and floats as decimal text (floats exactly, %.17g),
// other fixed-size types as the hex of their raw bytes. Sizes are bounded before
// anything is allocated (attribute_bytes); variable-length sequences are refused.
Result<AttributeValue> read_any_attr(hid_t obj, const std::string& name) {
  Handle attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
  if (!attr.valid()) return invalid_input("cannot open attribute " + name + hdf5_detail());
  Handle type(H5Aget_type(attr.get()));
  Handle space(H5Aget_space(attr.get()));
  if (!type.valid() || !space.valid())
    return invalid_input("cannot open attribute " + name + hdf5_detail());
  ASSIGN_OR_RETURN(size_t bytes, attribute_bytes(type.get(), space.get(), name));
  const size_t n = static_cast<size_t>(H5Sget_simple_extent_npoints(space.get()));
  AttributeValue v;
  const H5T_class_t cls = H5Tget_class(type.get());
  auto join = [&](const std::vector<std::string>& items) {
    if (H5Sget_simple_extent_type(space.get()) == H5S_SCALAR && items.size() == 1) return items[0];
    std::string out = "[";
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
    return out + "]";
  };
  std::vector<std::string> items;
  if (n == 0) {
    v.type = "empty";
    v.text = "[]";
    return v;
  }
  if (cls == H5T_STRING) {
    v.type = "string";
    ASSIGN_OR_RETURN(items, read_string_items(attr.get(), type.get(), n, bytes, name));
    if (H5Sget_simple_extent_type(space.get()) == H5S_SCALAR && items.size() == 1) {
      v.text = items[0];
    } else {
      for (std::string& item : items) item = "\"" + item + "\"";
      v.text = join(items);
    }
    return v;
  }
  if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type.get()) != H5T_SGN_NONE;
    v.type = "integer";
    std::vector<int64_t> values(n);
    if (H5Aread(attr.get(), is_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64, values.data()) < 0)
      return invalid_input("cannot read attribute " + name + hdf5_detail());
    for (int64_t x : values)
      items.push_back(is_signed ? std::to_string(x) : std::to_string(static_cast<uint64_t>(x)));
    v.text = join(items);
    return v;
  }
  if (cls == H5T_FLOAT) {
    v.type = "float";
    std::vector<double> values(n);
    if (H5Aread(attr.get(), H5T_NATIVE_DOUBLE, values.data()) < 0)
      return invalid_input("cannot read attribute " + name + hdf5_detail());
    for (double x : values) {
      char buf[40];
      std::snprintf(buf, sizeof buf, "%.17g", x);
      items.push_back(buf);
    }
    v.text = join(items);
    return v;
  }
  if (H5Tdetect_class(type.get(), H5T_VLEN) != 0 || H5Tdetect_class(type.get(), H5T_STRING) != 0 ||
      cls == H5T_REFERENCE)
    return invalid_input("attribute " + name + " has an unsupported type (" +
                         type_description(type.get()) + ")");
  v.type = type_description(type.get());
  std::vector<unsigned char> raw(bytes);
  if (H5Aread(attr.get(), type.get(), raw.data()) < 0)
    return invalid_input("cannot read attribute " + name + hdf5_detail());
  static constexpr char kHex[] = "0123456789abcdef";
  v.text = "0x";
  for (unsigned char c : raw) {
    v.text += kHex[c >> 4];
    v.text += kHex[c & 15];
  }
  return v;
}

template <typename T>
Result<T> read_numeric_attr(hid_t obj, const std::string& name, bool allow_float) {
  ASSIGN_OR_RETURN(OpenAttribute opened, open_attribute(obj, name));
  const Handle& attr = opened.attr;
  const Handle& type = opened.type;
  const Handle& space = opened.space;
  H5T_class_t cls = H5Tget_class(type.get());
  if (!(cls == H5T_INTEGER || (allow_float && cls == H5T_FLOAT)))
    return invalid_input("attribute " + name + " is not " +
                         (allow_float ? "a number" : "an integer"));
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    return invalid_input("attribute " + name + " is not a single value");
  T value{};
  hid_t mem = std::is_same_v<T, double> ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
  if (H5Aread(attr.get(), mem, &value) < 0)
    return invalid_input("cannot read attribute " + name + hdf5_detail());
  return value;
}

// The filters a dump's datasets may be stored through: the C++ writer's shuffle + deflate
// (DumpWriter::create with `compress`) and fletcher32, a checksum HDF5 verifies as it reads.
// Any other (lzf, szip, scaleoffset, nbit, a plugin) is refused before a byte is read: none
// is written by this project's writers, scaleoffset and nbit are lossy, and an unknown
// filter would have HDF5 look for a plugin on HDF5_PLUGIN_PATH.
constexpr H5Z_filter_t kDumpFilters[] = {H5Z_FILTER_DEFLATE, H5Z_FILTER_SHUFFLE,
                                         H5Z_FILTER_FLETCHER32};

// Why the storage of a dataset is not one a dump may use, checked from its creation
// properties before anything reads its data: a virtual dataset (its bytes are in other
// files), external storage (raw bytes in other files, which may be a FIFO or a device
// that blocks a reader forever), a layout HDF5 does not name, a filter outside
// kDumpFilters. Empty when the storage is contiguous, compact or chunked in the file.
Status check_storage(hid_t ds) {
  Handle dcpl(H5Dget_create_plist(ds));
  if (!dcpl.valid()) return invalid_input("cannot read its creation properties" + hdf5_detail());
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_VIRTUAL)
    return invalid_input(
        "is a virtual dataset (its data lies in other files); a dump stores every dataset's "
        "bytes in the dump itself");
  if (layout != H5D_CONTIGUOUS && layout != H5D_COMPACT && layout != H5D_CHUNKED)
    return invalid_input("has an unknown storage layout " + std::to_string(layout) + hdf5_detail());
  const int external = H5Pget_external_count(dcpl.get());
  if (external != 0) {
    char name[256] = {};
    off_t offset = 0;
    hsize_t size = 0;
    if (external < 0 || H5Pget_external(dcpl.get(), 0, sizeof name, name, &offset, &size) < 0)
      name[0] = '\0';
    H5Eclear2(H5E_DEFAULT);
    return invalid_input("keeps its data in external storage (" + std::to_string(external) +
                         " file(s), the first \"" + printable(name, false) +
                         "\"); a dump stores every dataset's bytes in the dump itself");
  }
  const int filters = H5Pget_nfilters(dcpl.get());
  if (filters < 0) return invalid_input("cannot read its filters" + hdf5_detail());
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0, config = 0;
    size_t values = 0;
    char name[128] = {};
    const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &values,
                                           nullptr, sizeof name, name, &config);
    if (std::find(std::begin(kDumpFilters), std::end(kDumpFilters), id) != std::end(kDumpFilters))
      continue;
    H5Eclear2(H5E_DEFAULT);
    return invalid_input("is stored through filter " + std::to_string(id) + " (\"" +
                         printable(name, false) +
                         "\"); a dump's datasets use only shuffle, deflate and fletcher32");
  }
  return Status::ok();
}

// Refuses `path` unless it names a regular file (a symbolic link to one is followed): a
// FIFO, a socket or a device would block HDF5's open or read forever, or act on the open.
// stat() only, so nothing is opened that is not a regular file; `st` is what was checked.
Status check_regular_file(const std::string& path, struct stat& st) {
  if (::stat(path.c_str(), &st) != 0)
    return invalid_input(path + (errno == ENOENT
                                     ? ": no such file"
                                     : std::string(": cannot stat: ") + std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    return invalid_input(path + ": not a regular file (" +
                         (S_ISFIFO(st.st_mode)   ? "a FIFO"
                          : S_ISDIR(st.st_mode)  ? "a directory"
                          : S_ISSOCK(st.st_mode) ? "a socket"
                                                 : "a device") +
                         "); a dump is read from a regular file only");
  return Status::ok();
}

// Refuses an open `file` that is not the regular file check_regular_file() saw at `path`
// (the name was pointed elsewhere in between).
Status check_same_file(hid_t file, const std::string& path, const struct stat& checked) {
  void* handle = nullptr;
  struct stat st {};
  if (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || handle == nullptr ||
      ::fstat(*static_cast<int*>(handle), &st) != 0)
    return invalid_input(path + ": cannot check the file HDF5 opened" + hdf5_detail());
  if (st.st_dev != checked.st_dev || st.st_ino != checked.st_ino || !S_ISREG(st.st_mode))
    return invalid_input(path + ": the file changed while it was opened");
  return Status::ok();
}

// Everything the listing needs about one dataset, or why it is not a valid dump dataset.
// `format_version` decides the digest algorithm a dataset must carry: XXH64 in version 1,
// XXH3-64 from version 2 on.
Result<DatasetInfo> inspect_dataset(hid_t ds, const std::string& path, int64_t format_version) {
  DatasetInfo info;
  info.path = path;
  RETURN_IF_ERROR(check_storage(ds));
  Handle type(H5Dget_type(ds));
  Handle space(H5Dget_space(ds));
  if (!type.valid() || !space.valid())
    return invalid_input("cannot read its datatype or dataspace" + hdf5_detail());

  std::string dtype_attr;
  htri_t has_dtype = H5Aexists(ds, "dtype");
  if (has_dtype < 0) return invalid_input("cannot look up attribute dtype" + hdf5_detail());
  if (has_dtype > 0) {
    ASSIGN_OR_RETURN(dtype_attr, read_string_attr(ds, "dtype"));
  }
  H5T_class_t cls = H5Tget_class(type.get());
  size_t size = H5Tget_size(type.get());
  bool is_u16 = cls == H5T_INTEGER && size == 2 && H5Tget_sign(type.get()) == H5T_SGN_NONE;
  bool is_i32 = cls == H5T_INTEGER && size == 4 && H5Tget_sign(type.get()) == H5T_SGN_2;
  bool is_f32 =
      cls == H5T_FLOAT && size == 4 &&
      (H5Tequal(type.get(), H5T_IEEE_F32LE) > 0 || H5Tequal(type.get(), H5T_IEEE_F32BE) > 0);
  bool is_f16 = cls == H5T_FLOAT && size == 2 && H5Tequal(type.get(), half_type()) > 0;
  if (is_u16 && dtype_attr == "bfloat16") {
    info.dtype = DType::kBF16;
  } else if (is_f16 && (dtype_attr.empty() || dtype_attr == "float16")) {
    info.dtype = DType::kF16;
  } else if (is_f32 && (dtype_attr.empty() || dtype_attr == "float32")) {
    info.dtype = DType::kF32;
  } else if (is_i32 && (dtype_attr.empty() || dtype_attr == "int32")) {
    info.dtype = DType::kI32;
  } else {
    std::string stored = type_description(type.get());
    if (!dtype_attr.empty())
      return invalid_input("attribute dtype is \"" + dtype_attr + "\" but the data is " + stored);
    return invalid_input("unsupported datatype " + stored +
                         " (a dump stores bfloat16 as uint16 with dtype=\"bfloat16\", "
                         "IEEE float16, float32 or int32)");
  }

  H5S_class_t space_class = H5Sget_simple_extent_type(space.get());
  if (space_class == H5S_SIMPLE) {
    int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 0 || rank > H5S_MAX_RANK) return invalid_input("invalid dataspace" + hdf5_detail());
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    if (H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
      return invalid_input("invalid dataspace" + hdf5_detail());
    for (hsize_t d : dims) info.shape.push_back(static_cast<int64_t>(d));
  } else if (space_class != H5S_SCALAR) {
    return invalid_input("has an empty (null) dataspace");
  }
  // Guard against corrupt extents before anyone allocates numel * size bytes: the
  // product is checked for overflow step by step against kMaxDatasetBytes. A zero extent
  // does not excuse the others: (0, 2^62, 2^62) holds nothing, but any stride or row size
  // computed from its inner extents overflows, so every extent counts at least 1.
  size_t nbytes = dtype_size(info.dtype);
  size_t bound = nbytes;
  for (int64_t d : info.shape) {
    const size_t at_least_one = d > 0 ? static_cast<size_t>(d) : 1;
    if (d < 0 || bound > kMaxDatasetBytes / at_least_one)
      return invalid_input("has an implausible shape " + shape_string(info.shape) + " (more than " +
                           std::to_string(kMaxDatasetBytes >> 40) + " TiB)");
    bound *= at_least_one;
    nbytes *= static_cast<size_t>(d);
  }
  info.nbytes = nbytes;

  ASSIGN_OR_RETURN(info.order, read_numeric_attr<int64_t>(ds, "order", false));
  htri_t has_digest = H5Aexists(ds, "digest");
  if (has_digest < 0) return invalid_input("cannot look up attribute digest" + hdf5_detail());
  htri_t has_source = H5Aexists(ds, "source_dtype");
  if (has_source < 0) return invalid_input("cannot look up attribute source_dtype" + hdf5_detail());
  if (has_source > 0) {
    ASSIGN_OR_RETURN(info.source_dtype, read_string_attr(ds, "source_dtype"));
  }
  if (has_digest > 0) {
    ASSIGN_OR_RETURN(info.digest, read_string_attr(ds, "digest"));
    const char* want = format_version == 1 ? "xxh64" : "xxh3";
    const DigestAlgorithm algorithm =
        format_version == 1 ? DigestAlgorithm::kXxh64 : DigestAlgorithm::kXxh3;
    std::optional<DatasetDigest> digest = parse_digest(info.digest);
    if (!digest || digest->algorithm != algorithm)
      return invalid_input("attribute digest is \"" + info.digest.substr(0, 40) + "\", not \"" +
                           want + ":\" and 16 hex digits (format_version " +
                           std::to_string(format_version) + ")");
  }
  return info;
}

// True when every link along the normalized `path` exists ("/" always does).
bool link_exists(hid_t file, const std::string& path) {
  if (path == "/") return true;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    if (H5Lexists(file, path.substr(0, pos).c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
  }
  return true;
}

struct VisitState {
  int64_t format_version = kDumpFormatVersion;
  std::vector<DatasetInfo> datasets;
  std::vector<std::string> groups;
  Status status;
};

herr_t visit_link(hid_t root, const char* name, const H5L_info_t* info, void* data) noexcept {
  auto* state = static_cast<VisitState*>(data);
  try {
    std::string path = normalize_path(name);
    // A soft, external or user-defined link names an object elsewhere, perhaps in another
    // file (which may be a FIFO): a dump's writers make hard links only, and the reader
    // follows nothing else.
    if (info->type != H5L_TYPE_HARD) {
      const char* kind = info->type == H5L_TYPE_SOFT       ? "a soft link"
                         : info->type == H5L_TYPE_EXTERNAL ? "an external link (to another file)"
                                                           : "a user-defined link";
      state->status = invalid_input("object " + printable(path, false) + ": is " + kind +
                                    "; a dump holds hard links only");
      return -1;
    }
    Handle obj(H5Oopen(root, name, H5P_DEFAULT));
    if (!obj.valid()) {
      state->status = invalid_input("object " + path + ": cannot open" + hdf5_detail());
      return -1;
    }
    if (H5Iget_type(obj.get()) == H5I_GROUP) state->groups.push_back(path);
    if (H5Iget_type(obj.get()) != H5I_DATASET) return 0;
    Result<DatasetInfo> ds = inspect_dataset(obj.get(), path, state->format_version);
    if (!ds.is_ok()) {
      state->status = ds.status().with_context("dataset " + path);
      return -1;
    }
    state->datasets.push_back(std::move(ds).value());
    return 0;
  } catch (const std::exception& e) {
    state->status = internal_error(std::string("listing datasets: ") + e.what());
    return -1;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// DumpWriter

Result<DumpWriter> DumpWriter::create(const std::string& path, const DumpHeader& header,
                                      bool compress) {
  Hdf5Lock lock;
  DumpWriter w;
  w.path_ = path;
  w.partial_path_ = path + ".partial";
  w.compress_ = compress;
  if (compress && H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0)
    return internal_error(path + ": this HDF5 build has no deflate filter");
  std::error_code ec;
  std::filesystem::remove(w.partial_path_, ec);
  w.removed_on_interrupt_.emplace(w.partial_path_);

  Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
  Handle fcpl(H5Pcreate(H5P_FILE_CREATE));
  // A fixed format version (1.8 objects, readable by every HDF5 since 1.8) keeps the
  // bytes independent of the library's defaults; no timestamps in object headers.
  if (!fapl.valid() || !fcpl.valid() ||
      H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18) < 0 ||
      H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG) < 0 ||
      H5Pset_obj_track_times(fcpl.get(), false) < 0)
    return internal_error(path + ": cannot set file properties" + hdf5_detail());
  // A missing folder is the user's input, not an internal failure.
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (!folder.empty() && !std::filesystem::is_directory(folder, ec))
    return invalid_input(path + ": cannot write the dump: folder " + folder.string() +
                         " does not exist");
  w.file_ = H5Fcreate(w.partial_path_.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get());
  if (w.file_ < 0) return internal_error("cannot create " + w.partial_path_ + hdf5_detail());

  Handle root(H5Gopen2(w.file_, "/", H5P_DEFAULT));
  int64_t version = kDumpFormatVersion;
  const std::pair<const char*, const std::string*> strings[] = {
      {"scenario", &header.scenario_json},
      {"scenario_sha256", &header.scenario_sha256},
      {"model_sha256", &header.model_sha256},
      {"partition", &header.partition},
      {"backend", &header.backend},
      {"producer", &header.producer_json},
      {"env", &header.env_json},
      {"level", &header.level},
  };
  std::string created = header.created.empty() ? utc_now_iso() : header.created;
  bool ok = root.valid() && write_string_attr(root.get(), "format", kDumpFormat) >= 0 &&
            write_numeric_attr(root.get(), "format_version", H5T_STD_I64LE, H5T_NATIVE_INT64,
                               &version) >= 0;
  for (const auto& [name, value] : strings)
    ok = ok && write_string_attr(root.get(), name, *value) >= 0;
  ok = ok && write_string_attr(root.get(), "created", created) >= 0 &&
       write_string_attr(root.get(), "volatile", header.volatile_attrs) >= 0;
  if (!ok)
    return internal_error(w.partial_path_ + ": cannot write the root attributes" + hdf5_detail());
  return w;
}

DumpWriter::DumpWriter(DumpWriter&& other) noexcept
    : path_(std::move(other.path_)),
      partial_path_(std::move(other.partial_path_)),
      removed_on_interrupt_(std::move(other.removed_on_interrupt_)),
      file_(std::exchange(other.file_, -1)),
      compress_(other.compress_),
      next_order_(other.next_order_) {}

DumpWriter& DumpWriter::operator=(DumpWriter&& other) noexcept {
  if (this != &other) {
    abandon();
    path_ = std::move(other.path_);
    partial_path_ = std::move(other.partial_path_);
    removed_on_interrupt_ = std::move(other.removed_on_interrupt_);
    file_ = std::exchange(other.file_, -1);
    compress_ = other.compress_;
    next_order_ = other.next_order_;
  }
  return *this;
}

DumpWriter::~DumpWriter() { abandon(); }

void DumpWriter::abandon() {
  if (file_ < 0) return;
  {
    Hdf5Lock lock;
    H5Fclose(file_);
    H5Eclear2(H5E_DEFAULT);
  }
  file_ = -1;
  std::error_code ec;
  std::filesystem::remove(partial_path_, ec);
}

Status DumpWriter::ensure_groups(const std::string& group_path) {
  if (group_path == "/") return Status::ok();
  Handle gcpl(H5Pcreate(H5P_GROUP_CREATE));
  if (!gcpl.valid() || H5Pset_obj_track_times(gcpl.get(), false) < 0)
    return internal_error(partial_path_ + ": cannot set group properties" + hdf5_detail());
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = group_path.find('/', pos + 1);
    std::string prefix = group_path.substr(0, pos);
    htri_t exists = H5Lexists(file_, prefix.c_str(), H5P_DEFAULT);
    if (exists < 0)
      return internal_error(partial_path_ + ": cannot look up " + prefix + hdf5_detail());
    if (exists > 0) {
      Handle obj(H5Oopen(file_, prefix.c_str(), H5P_DEFAULT));
      if (!obj.valid() || H5Iget_type(obj.get()) != H5I_GROUP)
        return invalid_input(partial_path_ + ": " + prefix + " exists and is not a group");
      continue;
    }
    Handle g(H5Gcreate2(file_, prefix.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT));
    if (!g.valid())
      return internal_error(partial_path_ + ": cannot create group " + prefix + hdf5_detail());
  }
  return Status::ok();
}

Status DumpWriter::write(const std::string& dataset_path, const Tensor& t) {
  Hdf5Lock lock;
  if (file_ < 0) return internal_error(path_ + ": write after finish");
  std::string path = normalize_path(dataset_path);
  if (path.empty() || path == "/")
    return invalid_input(path_ + ": invalid dataset path \"" + dataset_path + "\"");
  if (t.numel() > 0 && t.empty())
    return invalid_input(path_ + ": dataset " + path + ": tensor has no data");
  RETURN_IF_ERROR(ensure_groups(parent_of(path)));
  htri_t exists = H5Lexists(file_, path.c_str(), H5P_DEFAULT);
  if (exists != 0)
    return invalid_input(path_ + ": dataset " + path + " is written twice" + hdf5_detail());

  const Shape& shape = t.shape();
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space(shape.empty()
                   ? H5Screate(H5S_SCALAR)
                   : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  bool ok = space.valid() && dcpl.valid() && H5Pset_obj_track_times(dcpl.get(), false) >= 0 &&
            H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER) >= 0;
  // Small datasets stay contiguous: a chunk index costs more than deflate saves on them.
  if (ok && compress_ && !shape.empty() && t.nbytes() >= 16384) {
    // Chunks of about 1 MiB along axis 0: whole rows, so streaming reads stay aligned.
    size_t row_bytes = t.nbytes() / static_cast<size_t>(shape[0]);
    std::vector<hsize_t> chunk = dims;
    chunk[0] = std::clamp<hsize_t>((1u << 20) / std::max<size_t>(row_bytes, 1), 1, dims[0]);
    ok = H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) >= 0 &&
         H5Pset_shuffle(dcpl.get()) >= 0 && H5Pset_deflate(dcpl.get(), 4) >= 0;
  }
  if (!ok) return internal_error(path_ + ": dataset " + path + ": cannot set up" + hdf5_detail());
  Handle ds(H5Dcreate2(file_, path.c_str(), file_type(t.dtype()), space.get(), H5P_DEFAULT,
                       dcpl.get(), H5P_DEFAULT));
  if (!ds.valid())
    return internal_error(path_ + ": dataset " + path + ": cannot create" + hdf5_detail());
  if (t.numel() > 0 &&
      H5Dwrite(ds.get(), memory_type(t.dtype()), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.bytes()) < 0)
    return internal_error(path_ + ": dataset " + path + ": cannot write" + hdf5_detail());

  int64_t order = next_order_++;
  std::string digest =
      dataset_digest_hex(std::span<const std::byte>(t.bytes(), t.numel() > 0 ? t.nbytes() : 0));
  if (write_string_attr(ds.get(), "dtype", dtype_name(t.dtype())) < 0 ||
      write_numeric_attr(ds.get(), "order", H5T_STD_I64LE, H5T_NATIVE_INT64, &order) < 0 ||
      write_string_attr(ds.get(), "digest", digest) < 0)
    return internal_error(path_ + ": dataset " + path + ": cannot write attributes" +
                          hdf5_detail());
  return Status::ok();
}

Result<int64_t> DumpWriter::open_or_create_object(const std::string& object_path) {
  std::string path = normalize_path(object_path);
  if (path.empty()) return invalid_input(path_ + ": invalid object path \"" + object_path + "\"");
  if (!link_exists(file_, path)) RETURN_IF_ERROR(ensure_groups(path));
  hid_t obj = H5Oopen(file_, path.c_str(), H5P_DEFAULT);
  if (obj < 0) return internal_error(path_ + ": cannot open " + path + hdf5_detail());
  return obj;
}

Status DumpWriter::set_attr(const std::string& object_path, const std::string& name,
                            const std::string& value) {
  Hdf5Lock lock;
  if (file_ < 0) return internal_error(path_ + ": set_attr after finish");
  ASSIGN_OR_RETURN(int64_t id, open_or_create_object(object_path));
  Handle obj(id);
  if (write_string_attr(obj.get(), name, value) < 0)
    return internal_error(path_ + ": " + object_path + ": cannot write attribute " + name +
                          hdf5_detail());
  return Status::ok();
}

Status DumpWriter::set_attr(const std::string& object_path, const std::string& name, double value) {
  Hdf5Lock lock;
  if (file_ < 0) return internal_error(path_ + ": set_attr after finish");
  ASSIGN_OR_RETURN(int64_t id, open_or_create_object(object_path));
  Handle obj(id);
  if (write_numeric_attr(obj.get(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value) < 0)
    return internal_error(path_ + ": " + object_path + ": cannot write attribute " + name +
                          hdf5_detail());
  return Status::ok();
}

Status DumpWriter::set_int_attr(const std::string& object_path, const std::string& name,
                                int64_t value) {
  Hdf5Lock lock;
  if (file_ < 0) return internal_error(path_ + ": set_attr after finish");
  ASSIGN_OR_RETURN(int64_t id, open_or_create_object(object_path));
  Handle obj(id);
  if (write_numeric_attr(obj.get(), name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value) < 0)
    return internal_error(path_ + ": " + object_path + ": cannot write attribute " + name +
                          hdf5_detail());
  return Status::ok();
}

Status DumpWriter::finish() {
  Hdf5Lock lock;
  if (file_ < 0) return internal_error(path_ + ": finish called twice");
  pause_midway_for_test();
  herr_t flushed = H5Fflush(file_, H5F_SCOPE_GLOBAL);
  herr_t closed = H5Fclose(file_);
  file_ = -1;
  std::error_code ec;
  if (flushed < 0 || closed < 0) {
    Status st = internal_error("cannot close " + partial_path_ + hdf5_detail());
    std::filesystem::remove(partial_path_, ec);
    return st;
  }
  std::filesystem::rename(partial_path_, path_, ec);
  if (ec) {
    std::filesystem::remove(partial_path_, ec);
    return internal_error("cannot rename " + partial_path_ + " to " + path_ + ": " + ec.message());
  }
  return Status::ok();
}

// ---------------------------------------------------------------------------------------
// DumpReader

Result<DumpReader> DumpReader::open(const std::string& path) {
  Hdf5Lock lock;
  struct stat checked {};
  RETURN_IF_ERROR(check_regular_file(path, checked));
  htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 <= 0)
    return invalid_input(path + ": not an HDF5 file" + (is_hdf5 < 0 ? hdf5_detail() : ""));
  DumpReader r;
  r.path_ = path;
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG);
  r.file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get());
  if (r.file_ < 0)
    return invalid_input(path + ": cannot open (truncated or corrupt HDF5 file)" + hdf5_detail());
  RETURN_IF_ERROR(check_same_file(r.file_, path, checked));

  Handle root(H5Gopen2(r.file_, "/", H5P_DEFAULT));
  if (!root.valid()) return invalid_input(path + ": cannot open the root group" + hdf5_detail());
  Result<std::string> format = read_string_attr(root.get(), "format");
  if (!format.is_ok()) return format.status().with_context(path + ": not a splitcheck dump");
  if (*format != kDumpFormat)
    return invalid_input(path + ": not a splitcheck dump (format is \"" + *format +
                         "\", expected \"" + kDumpFormat + "\")");
  Result<int64_t> version = read_numeric_attr<int64_t>(root.get(), "format_version", false);
  if (!version.is_ok()) return version.status().with_context(path);
  if (*version < kDumpFormatVersionOldest || *version > kDumpFormatVersion)
    return invalid_input(path + ": unsupported format_version " + std::to_string(*version) +
                         " (this build reads " + std::to_string(kDumpFormatVersionOldest) + " to " +
                         std::to_string(kDumpFormatVersion) + ")");
  r.header_.format_version = *version;

  // Optional root attributes: absent is empty, present must be a string.
  const std::pair<const char*, std::string*> fields[] = {
      {"scenario", &r.header_.scenario_json},
      {"scenario_sha256", &r.header_.scenario_sha256},
      {"model_sha256", &r.header_.model_sha256},
      {"partition", &r.header_.partition},
      {"backend", &r.header_.backend},
      {"producer", &r.header_.producer_json},
      {"env", &r.header_.env_json},
      {"level", &r.header_.level},
      {"created", &r.header_.created},
      {"volatile", &r.header_.volatile_attrs},
  };
  for (const auto& [name, field] : fields) {
    htri_t exists = H5Aexists(root.get(), name);
    if (exists < 0)
      return invalid_input(path + ": cannot look up attribute " + name + hdf5_detail());
    if (exists == 0) {
      field->clear();
      continue;
    }
    Result<std::string> value = read_string_attr(root.get(), name);
    if (!value.is_ok()) return value.status().with_context(path);
    *field = std::move(value).value();
  }

  VisitState state;
  state.format_version = *version;
  herr_t visited = H5Lvisit(r.file_, H5_INDEX_NAME, H5_ITER_INC, visit_link, &state);
  if (!state.status.is_ok()) return state.status.with_context(path);
  if (visited < 0) return invalid_input(path + ": cannot list datasets" + hdf5_detail());
  r.datasets_ = std::move(state.datasets);
  r.objects_ = std::move(state.groups);
  r.objects_.push_back("/");
  for (const DatasetInfo& d : r.datasets_) r.objects_.push_back(d.path);
  std::sort(r.objects_.begin(), r.objects_.end());
  std::sort(r.datasets_.begin(), r.datasets_.end(), [](const DatasetInfo& a, const DatasetInfo& b) {
    return a.order != b.order ? a.order < b.order : a.path < b.path;
  });
  for (size_t i = 0; i < r.datasets_.size(); ++i) r.index_[r.datasets_[i].path] = i;
  return r;
}

DumpReader::DumpReader(DumpReader&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::exchange(other.file_, -1)),
      header_(std::move(other.header_)),
      datasets_(std::move(other.datasets_)),
      objects_(std::move(other.objects_)),
      index_(std::move(other.index_)),
      open_dataset_path_(std::move(other.open_dataset_path_)),
      open_dataset_(std::exchange(other.open_dataset_, -1)) {}

DumpReader& DumpReader::operator=(DumpReader&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, -1);
    header_ = std::move(other.header_);
    datasets_ = std::move(other.datasets_);
    objects_ = std::move(other.objects_);
    index_ = std::move(other.index_);
    open_dataset_path_ = std::move(other.open_dataset_path_);
    open_dataset_ = std::exchange(other.open_dataset_, -1);
  }
  return *this;
}

DumpReader::~DumpReader() { close(); }

void DumpReader::close() {
  if (file_ < 0 && open_dataset_ < 0) return;
  Hdf5Lock lock;
  if (open_dataset_ >= 0) H5Dclose(open_dataset_);
  if (file_ >= 0) H5Fclose(file_);
  H5Eclear2(H5E_DEFAULT);
  open_dataset_ = -1;
  file_ = -1;
  open_dataset_path_.clear();
}

const DatasetInfo* DumpReader::find(const std::string& path) const {
  auto it = index_.find(normalize_path(path));
  return it == index_.end() ? nullptr : &datasets_[it->second];
}

bool DumpReader::exists(const std::string& path) const {
  Hdf5Lock lock;
  if (file_ < 0) return false;
  std::string p = normalize_path(path);
  if (p.empty()) return false;
  if (!link_exists(file_, p)) return false;
  htri_t obj = H5Oexists_by_name(file_, p.c_str(), H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  return obj > 0;
}

Result<int64_t> DumpReader::dataset_handle(const std::string& path) {
  if (open_dataset_ >= 0 && open_dataset_path_ == path) return open_dataset_;
  if (open_dataset_ >= 0) H5Dclose(open_dataset_);
  open_dataset_path_.clear();
  open_dataset_ = H5Dopen2(file_, path.c_str(), H5P_DEFAULT);
  if (open_dataset_ < 0)
    return invalid_input(path_ + ": dataset " + path + ": cannot open" + hdf5_detail());
  open_dataset_path_ = path;
  return open_dataset_;
}

Result<Tensor> DumpReader::read(const std::string& path) {
  const DatasetInfo* info = find(path);
  if (info == nullptr) return invalid_input(path_ + ": no dataset " + path);
  Tensor t;
  try {
    t = Tensor::zeros(info->dtype, info->shape);
  } catch (const std::bad_alloc&) {
    return invalid_input(path_ + ": dataset " + info->path + ": cannot allocate " +
                         std::to_string(info->nbytes) + " bytes");
  }
  if (info->nbytes == 0) return t;
  Hdf5Lock lock;
  ASSIGN_OR_RETURN(int64_t ds, dataset_handle(info->path));
  if (H5Dread(ds, memory_type(info->dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data<void>()) < 0)
    return invalid_input(path_ + ": dataset " + info->path + ": cannot read" + hdf5_detail());
  DatasetDigestCheck check(path_, info->path, info->digest);
  check.update(std::span<const std::byte>(t.bytes(), info->nbytes));
  RETURN_IF_ERROR(check.finish());
  return t;
}

Status DumpReader::read_chunk(const std::string& path, int64_t first_row, int64_t rows,
                              std::vector<std::byte>& out) {
  const DatasetInfo* info = find(path);
  if (info == nullptr) return invalid_input(path_ + ": no dataset " + path);
  if (info->shape.empty()) {
    if (first_row != 0 || rows != 1)
      return invalid_input(path_ + ": dataset " + info->path + ": scalar has only row 0");
    return read_slab(path, {}, {}, out);
  }
  std::vector<int64_t> start(info->shape.size(), 0), count = info->shape;
  start[0] = first_row;
  count[0] = rows;
  return read_slab(path, start, count, out);
}

Status DumpReader::read_slab(const std::string& path, const std::vector<int64_t>& start,
                             const std::vector<int64_t>& count, std::vector<std::byte>& out) {
  const DatasetInfo* info = find(path);
  if (info == nullptr) return invalid_input(path_ + ": no dataset " + path);
  const Shape& shape = info->shape;
  if (start.size() != shape.size() || count.size() != shape.size())
    return invalid_input(path_ + ": dataset " + info->path + ": selection rank " +
                         std::to_string(start.size()) + " for shape " + shape_string(shape));
  size_t nbytes = dtype_size(info->dtype);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (start[i] < 0 || count[i] < 0 || start[i] > shape[i] || count[i] > shape[i] - start[i])
      return invalid_input(path_ + ": dataset " + info->path + ": selection outside shape " +
                           shape_string(shape));
    nbytes *= static_cast<size_t>(count[i]);
  }
  try {
    out.resize(nbytes);
  } catch (const std::bad_alloc&) {
    return invalid_input(path_ + ": dataset " + info->path + ": cannot allocate " +
                         std::to_string(nbytes) + " bytes");
  }
  if (nbytes == 0) return Status::ok();
  Hdf5Lock lock;
  ASSIGN_OR_RETURN(int64_t ds, dataset_handle(info->path));
  herr_t rc;
  if (shape.empty()) {
    rc = H5Dread(ds, memory_type(info->dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
  } else {
    std::vector<hsize_t> hstart(start.begin(), start.end()), hcount(count.begin(), count.end());
    Handle file_space(H5Dget_space(ds));
    Handle mem_space(H5Screate_simple(static_cast<int>(hcount.size()), hcount.data(), nullptr));
    rc = -1;
    if (file_space.valid() && mem_space.valid() &&
        H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, hstart.data(), nullptr, hcount.data(),
                            nullptr) >= 0)
      rc = H5Dread(ds, memory_type(info->dtype), mem_space.get(), file_space.get(), H5P_DEFAULT,
                   out.data());
  }
  if (rc < 0)
    return invalid_input(path_ + ": dataset " + info->path + ": cannot read" + hdf5_detail());
  return Status::ok();
}

std::optional<uint64_t> DumpReader::contiguous_offset(const std::string& path) {
  const DatasetInfo* info = find(path);
  if (info == nullptr || info->nbytes == 0) return std::nullopt;
  Hdf5Lock lock;
  Result<int64_t> ds = dataset_handle(info->path);
  if (!ds.is_ok()) return std::nullopt;
  Handle dcpl(H5Dget_create_plist(*ds));
  Handle type(H5Dget_type(*ds));
  bool direct = dcpl.valid() && type.valid() && H5Pget_layout(dcpl.get()) == H5D_CONTIGUOUS &&
                H5Pget_nfilters(dcpl.get()) == 0 && H5Pget_external_count(dcpl.get()) == 0 &&
                H5Tequal(type.get(), memory_type(info->dtype)) > 0 &&
                H5Dget_storage_size(*ds) == info->nbytes;
  haddr_t offset = direct ? H5Dget_offset(*ds) : HADDR_UNDEF;
  H5Eclear2(H5E_DEFAULT);
  if (offset == HADDR_UNDEF) return std::nullopt;
  return static_cast<uint64_t>(offset);
}

template <typename T, typename ReadAttr>
Result<T> DumpReader::read_attr(const std::string& object_path, ReadAttr read) const {
  Hdf5Lock lock;
  std::string p = normalize_path(object_path);
  if (!exists(p)) return invalid_input(path_ + ": no object " + object_path);
  Handle obj(H5Oopen(file_, p.c_str(), H5P_DEFAULT));
  if (!obj.valid()) return invalid_input(path_ + ": cannot open " + p + hdf5_detail());
  Result<T> v = read(obj.get());
  if (!v.is_ok()) return v.status().with_context(path_ + ": " + p);
  return v;
}

Result<std::map<std::string, AttributeValue>> DumpReader::attributes(
    const std::string& object_path) const {
  return read_attr<std::map<std::string, AttributeValue>>(
      object_path, [&](hid_t obj) -> Result<std::map<std::string, AttributeValue>> {
        H5O_info_t oinfo;
        if (H5Oget_info2(obj, &oinfo, H5O_INFO_NUM_ATTRS) < 0)
          return invalid_input("cannot list attributes" + hdf5_detail());
        std::map<std::string, AttributeValue> out;
        for (hsize_t i = 0; i < oinfo.num_attrs; ++i) {
          ssize_t len =
              H5Aget_name_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
          if (len < 0 || static_cast<size_t>(len) > kMaxAttributeBytes)
            return invalid_input("cannot read the name of attribute " + std::to_string(i) +
                                 hdf5_detail());
          std::string name(static_cast<size_t>(len) + 1, '\0');
          if (H5Aget_name_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                                 H5P_DEFAULT) < 0)
            return invalid_input("cannot read the name of attribute " + std::to_string(i) +
                                 hdf5_detail());
          name.resize(static_cast<size_t>(len));
          ASSIGN_OR_RETURN(out[name], read_any_attr(obj, name));
        }
        return out;
      });
}

Result<std::string> DumpReader::attr_string(const std::string& object_path,
                                            const std::string& name) const {
  return read_attr<std::string>(object_path,
                                [&](hid_t obj) { return read_string_attr(obj, name); });
}

Result<int64_t> DumpReader::attr_int(const std::string& object_path,
                                     const std::string& name) const {
  return read_attr<int64_t>(
      object_path, [&](hid_t obj) { return read_numeric_attr<int64_t>(obj, name, false); });
}

Result<double> DumpReader::attr_double(const std::string& object_path,
                                       const std::string& name) const {
  return read_attr<double>(object_path,
                           [&](hid_t obj) { return read_numeric_attr<double>(obj, name, true); });
}

}  // namespace splitcheck
