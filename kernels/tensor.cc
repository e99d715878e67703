#include "kernels/tensor.h"

#include <cstring>
#include <stdexcept>

namespace splitcheck {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return 2;
    case DType::kF32:
    case DType::kI32:
      return 4;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return "bfloat16";
    case DType::kF32:
      return "float32";
    case DType::kI32:
      return "int32";
  }
  return "?";
}

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.owner_ = std::make_shared<std::vector<std::byte>>(t.nbytes());
  t.data_ = t.owner_->data();
  return t;
}

Tensor Tensor::borrow(DType dtype, Shape shape, void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = zeros(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  if (t.numel() != numel()) throw std::invalid_argument("reshape changes element count");
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  if (shape_.empty() || begin < 0 || end > shape_[0] || begin > end)
    throw std::out_of_range("Tensor::rows out of range");
  Tensor t = *this;
  t.shape_[0] = end - begin;
  const size_t row_bytes = shape_[0] ? nbytes() / static_cast<size_t>(shape_[0]) : 0;
  t.data_ = static_cast<std::byte*>(data_) + static_cast<size_t>(begin) * row_bytes;
  return t;
}

bool Tensor::bit_equal(const Tensor& other) const {
  if (dtype_ != other.dtype_ || shape_ != other.shape_) return false;
  return nbytes() == 0 || std::memcmp(data_, other.data_, nbytes()) == 0;
}

}  // namespace splitcheck
