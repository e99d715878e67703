#include "harness/engine/handoff.h"

#include <fmt/format.h>

#include <cstring>

namespace splitcheck {
namespace {

constexpr char kMagic[4] = {'S', 'C', 'H', 'P'};
constexpr uint32_t kVersion = 1;

template <typename T>
void put(std::vector<std::byte>& out, const T& v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

void put_bytes(std::vector<std::byte>& out, const Tensor& t) {
  out.insert(out.end(), t.bytes(), t.bytes() + t.nbytes());
}

class Cursor {
 public:
  explicit Cursor(const std::vector<std::byte>& b) : b_(b) {}
  template <typename T>
  bool get(T& v) {
    if (pos_ + sizeof(T) > b_.size()) return false;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool get_tensor(Tensor& t) {
    if (pos_ + t.nbytes() > b_.size()) return false;
    if (t.nbytes() == 0) return true;  // an empty tensor has no storage to copy into
    std::memcpy(t.data<std::byte>(), b_.data() + pos_, t.nbytes());
    pos_ += t.nbytes();
    return true;
  }
  size_t remaining() const { return b_.size() - pos_; }

 private:
  const std::vector<std::byte>& b_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<std::byte> encode_payload(const HandoffPayload& p) {
  std::vector<std::byte> out;
  out.reserve(64 + p.hidden.nbytes() + p.bank.nbytes() + p.aux.nbytes());
  for (char c : kMagic) put(out, c);
  put(out, kVersion);
  put(out, p.forward);
  put(out, p.hidden.dim(0));
  put(out, p.hidden.dim(1));
  put(out, p.bank.dim(1));
  put(out, static_cast<int64_t>(p.aux_ids.size()));
  for (int32_t id : p.aux_ids) put(out, id);
  put_bytes(out, p.hidden);
  put_bytes(out, p.bank);
  put_bytes(out, p.aux);
  return out;
}

Result<HandoffPayload> decode_payload(const std::vector<std::byte>& bytes,
                                      const PayloadExpectation& e) {
  Cursor c(bytes);
  char magic[4];
  uint32_t version = 0;
  int32_t forward = 0;
  int64_t tokens = 0, hidden = 0, rows = 0, n_aux = 0;
  for (char& m : magic)
    if (!c.get(m)) return internal_error("handoff payload truncated in its header");
  if (std::memcmp(magic, kMagic, 4) != 0) return internal_error("handoff payload: bad magic");
  if (!c.get(version) || version != kVersion)
    return internal_error(
        fmt::format("handoff payload: version {} (expected {})", version, kVersion));
  if (!c.get(forward) || !c.get(tokens) || !c.get(hidden) || !c.get(rows) || !c.get(n_aux))
    return internal_error("handoff payload truncated in its header");
  auto mismatch = [&](const char* field, int64_t got, int64_t want) {
    return internal_error(
        fmt::format("handoff payload of forward {}: {} is {}, the receiver expects {}", forward,
                    field, got, want));
  };
  if (forward != e.forward) return mismatch("forward", forward, e.forward);
  if (tokens != e.tokens) return mismatch("tokens", tokens, e.tokens);
  if (hidden != e.hidden) return mismatch("hidden size", hidden, e.hidden);
  if (rows != e.bank_rows) return mismatch("bank rows", rows, e.bank_rows);
  if (n_aux != static_cast<int64_t>(e.aux_ids.size()))
    return mismatch("aux tap count", n_aux, static_cast<int64_t>(e.aux_ids.size()));
  HandoffPayload p;
  p.forward = forward;
  p.aux_ids.resize(static_cast<size_t>(n_aux));
  for (int32_t& id : p.aux_ids)
    if (!c.get(id)) return internal_error("handoff payload truncated in its aux ids");
  if (p.aux_ids != e.aux_ids)
    return internal_error("handoff payload: aux tap ids differ from the expected ids");
  p.hidden = Tensor::zeros(DType::kBF16, {tokens, hidden});
  p.bank = Tensor::zeros(DType::kBF16, {tokens, rows, hidden});
  p.aux = Tensor::zeros(DType::kBF16, {tokens, n_aux * hidden});
  if (!c.get_tensor(p.hidden) || !c.get_tensor(p.bank) || !c.get_tensor(p.aux))
    return internal_error(
        fmt::format("handoff payload of forward {} truncated in its tensors", forward));
  if (c.remaining() != 0)
    return internal_error(
        fmt::format("handoff payload of forward {} has {} trailing bytes", forward, c.remaining()));
  return p;
}

}  // namespace splitcheck
