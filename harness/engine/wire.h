// Little-endian byte writing and bounds-checked reading of the messages that cross a
// process boundary (the job envelope, the MPI transport's commands): counts, strings,
// tensors and run records. A reader never reads past the end nor allocates more than the
// bytes it was given could hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "reference/record.h"

namespace splitcheck {

// Bound a malformed count cannot exceed before anything is allocated for it.
inline constexpr uint64_t kWireMaxCount = uint64_t{1} << 32;

// Appends values to `out`.
class WireWriter {
 public:
  template <typename T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out.insert(out.end(), p, p + s.size());
  }
  void put_tensor(const Tensor& t) {
    put(static_cast<uint8_t>(t.empty() ? 0 : 1));
    if (t.empty()) return;
    put(static_cast<uint8_t>(t.dtype()));
    put(static_cast<uint64_t>(t.shape().size()));
    for (int64_t d : t.shape()) put(d);
    const Tensor host = t.on_host();
    out.insert(out.end(), host.bytes(), host.bytes() + host.nbytes());
  }
  void put_record(const RunRecord& r) {
    put(static_cast<uint64_t>(r.entries().size()));
    for (const RecordEntry& e : r.entries()) {
      put_string(e.path);
      put_tensor(e.tensor);
    }
    put(static_cast<uint64_t>(r.attrs().size()));
    for (const auto& [object, attrs] : r.attrs()) {
      put_string(object);
      put(static_cast<uint64_t>(attrs.size()));
      for (const auto& [name, value] : attrs) {
        put_string(name);
        put(static_cast<uint8_t>(value.index()));
        if (const auto* i = std::get_if<int64_t>(&value)) put(*i);
        if (const auto* d = std::get_if<double>(&value)) put(*d);
        if (const auto* s = std::get_if<std::string>(&value)) put_string(*s);
      }
    }
  }
  std::vector<std::byte> out;
};

// Reads values back in the order they were written; every get returns false rather than
// read past the end.
class WireReader {
 public:
  explicit WireReader(const std::vector<std::byte>& b) : b_(b) {}
  template <typename T>
  bool get(T& v) {
    if (b_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool get_count(uint64_t& n) { return get(n) && n < kWireMaxCount && n <= b_.size() - pos_ + 1; }
  bool get_string(std::string& s) {
    uint64_t n = 0;
    if (!get_count(n) || b_.size() - pos_ < n) return false;
    s.assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool get_tensor(Tensor& t) {
    uint8_t present = 0, dtype = 0;
    uint64_t rank = 0;
    if (!get(present) || present > 1) return false;
    if (present == 0) {
      t = Tensor();
      return true;
    }
    if (!get(dtype) || dtype > static_cast<uint8_t>(DType::kI32) || !get_count(rank) || rank > 8)
      return false;
    Shape shape(rank);
    uint64_t numel = 1;
    for (int64_t& d : shape) {
      if (!get(d) || d < 0 || d > static_cast<int64_t>(kWireMaxCount)) return false;
      numel *= static_cast<uint64_t>(d);
      if (numel > b_.size()) return false;
    }
    const size_t nbytes = numel * dtype_size(static_cast<DType>(dtype));
    if (b_.size() - pos_ < nbytes) return false;
    t = Tensor::zeros(static_cast<DType>(dtype), shape);
    if (nbytes > 0) std::memcpy(t.data<std::byte>(), b_.data() + pos_, nbytes);
    pos_ += nbytes;
    return true;
  }
  bool get_record(RunRecord& r) {
    uint64_t n = 0;
    if (!get_count(n)) return false;
    for (uint64_t i = 0; i < n; ++i) {
      std::string path;
      Tensor t;
      if (!get_string(path) || !get_tensor(t)) return false;
      r.add(std::move(path), std::move(t));
    }
    uint64_t objects = 0;
    if (!get_count(objects)) return false;
    for (uint64_t i = 0; i < objects; ++i) {
      std::string object;
      uint64_t attrs = 0;
      if (!get_string(object) || !get_count(attrs)) return false;
      for (uint64_t a = 0; a < attrs; ++a) {
        std::string name;
        uint8_t kind = 0;
        if (!get_string(name) || !get(kind)) return false;
        if (kind == 0) {
          int64_t v = 0;
          if (!get(v)) return false;
          r.set_attr(object, name, v);
        } else if (kind == 1) {
          double v = 0;
          if (!get(v)) return false;
          r.set_attr(object, name, v);
        } else if (kind == 2) {
          std::string v;
          if (!get_string(v)) return false;
          r.set_attr(object, name, std::move(v));
        } else {
          return false;
        }
      }
    }
    return true;
  }
  // Takes the next `n` bytes into `to`; false when fewer remain.
  bool get_bytes(uint64_t n, std::vector<std::byte>& to) {
    if (b_.size() - pos_ < n) return false;
    to.assign(b_.begin() + static_cast<std::ptrdiff_t>(pos_),
              b_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return true;
  }
  size_t remaining() const { return b_.size() - pos_; }
  size_t position() const { return pos_; }

 private:
  const std::vector<std::byte>& b_;
  size_t pos_ = 0;
};

}  // namespace splitcheck
