#include "harness/engine/handoff.h"

#include <fmt/format.h>

#include <cstring>

#include "kernels/tensor_copy.h"

namespace splitcheck {
namespace {

constexpr char kHandoffMagic[4] = {'S', 'C', 'H', 'P'};
constexpr uint32_t kHandoffVersion = 1;

template <typename T>
void put(std::vector<std::byte>& out, const T& v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

void put_bytes(std::vector<std::byte>& out, const Tensor& t) {
  const Tensor host = t.on_host();
  out.insert(out.end(), host.bytes(), host.bytes() + host.nbytes());
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

std::vector<std::byte> encode_payload_header(int32_t forward, int64_t tokens, int64_t hidden,
                                             int64_t bank_rows,
                                             const std::vector<int32_t>& aux_ids) {
  std::vector<std::byte> out;
  out.reserve(44 + 4 * aux_ids.size());
  for (char c : kHandoffMagic) put(out, c);
  put(out, kHandoffVersion);
  put(out, forward);
  put(out, tokens);
  put(out, hidden);
  put(out, bank_rows);
  put(out, static_cast<int64_t>(aux_ids.size()));
  for (int32_t id : aux_ids) put(out, id);
  return out;
}

std::vector<std::byte> encode_payload_header(const HandoffPayload& p) {
  return encode_payload_header(p.forward, p.hidden.dim(0), p.hidden.dim(1), p.bank.dim(1),
                               p.aux_ids);
}

size_t payload_body_bytes(int64_t tokens, int64_t hidden, int64_t bank_rows, size_t n_aux) {
  return static_cast<size_t>(tokens * hidden * (1 + bank_rows + static_cast<int64_t>(n_aux))) *
         sizeof(bf16);
}

std::vector<std::byte> encode_payload(const HandoffPayload& p) {
  std::vector<std::byte> out = encode_payload_header(p);
  out.reserve(out.size() + p.hidden.nbytes() + p.bank.nbytes() + p.aux.nbytes());
  put_bytes(out, p.hidden);
  put_bytes(out, p.bank);
  put_bytes(out, p.aux);
  return out;
}

Tensor payload_body(const HandoffPayload& p, Device device) {
  const size_t a = p.hidden.nbytes(), b = p.bank.nbytes(), c = p.aux.nbytes();
  Tensor body = Tensor::for_overwrite(DType::kBF16,
                                      {static_cast<int64_t>((a + b + c) / sizeof(bf16))}, device);
  copy_tensor_runs(body, 0, a, p.hidden, 0, a, a, 1);
  copy_tensor_runs(body, a, b, p.bank, 0, b, b, 1);
  copy_tensor_runs(body, a + b, c, p.aux, 0, c, c, 1);
  return body;
}

namespace {

// The header's fields, checked against the receiver's expectation.
struct Header {
  int32_t forward = 0;
  int64_t tokens = 0, hidden = 0, rows = 0;
  std::vector<int32_t> aux_ids;
};

Result<Header> read_header(Cursor& c, const PayloadExpectation& e) {
  char magic[4];
  uint32_t version = 0;
  Header h;
  int64_t n_aux = 0;
  for (char& m : magic)
    if (!c.get(m)) return internal_error("handoff payload truncated in its header");
  if (std::memcmp(magic, kHandoffMagic, 4) != 0)
    return internal_error("handoff payload: bad magic");
  if (!c.get(version) || version != kHandoffVersion)
    return internal_error(
        fmt::format("handoff payload: version {} (expected {})", version, kHandoffVersion));
  if (!c.get(h.forward) || !c.get(h.tokens) || !c.get(h.hidden) || !c.get(h.rows) || !c.get(n_aux))
    return internal_error("handoff payload truncated in its header");
  auto mismatch = [&](const char* field, int64_t got, int64_t want) {
    return internal_error(
        fmt::format("handoff payload of forward {}: {} is {}, the receiver expects {}", h.forward,
                    field, got, want));
  };
  if (h.forward != e.forward) return mismatch("forward", h.forward, e.forward);
  if (h.tokens != e.tokens) return mismatch("tokens", h.tokens, e.tokens);
  if (h.hidden != e.hidden) return mismatch("hidden size", h.hidden, e.hidden);
  if (h.rows != e.bank_rows) return mismatch("bank rows", h.rows, e.bank_rows);
  if (n_aux != static_cast<int64_t>(e.aux_ids.size()))
    return mismatch("aux tap count", n_aux, static_cast<int64_t>(e.aux_ids.size()));
  h.aux_ids.resize(static_cast<size_t>(n_aux));
  for (int32_t& id : h.aux_ids)
    if (!c.get(id)) return internal_error("handoff payload truncated in its aux ids");
  if (h.aux_ids != e.aux_ids)
    return internal_error("handoff payload: aux tap ids differ from the expected ids");
  return h;
}

}  // namespace

Result<HandoffPayload> decode_payload(const std::vector<std::byte>& bytes,
                                      const PayloadExpectation& e) {
  Cursor c(bytes);
  ASSIGN_OR_RETURN(Header h, read_header(c, e));
  const int64_t n_aux = static_cast<int64_t>(h.aux_ids.size());
  HandoffPayload p;
  p.forward = h.forward;
  p.aux_ids = h.aux_ids;
  p.hidden = Tensor::zeros(DType::kBF16, {h.tokens, h.hidden});
  p.bank = Tensor::zeros(DType::kBF16, {h.tokens, h.rows, h.hidden});
  p.aux = Tensor::zeros(DType::kBF16, {h.tokens, n_aux * h.hidden});
  if (!c.get_tensor(p.hidden) || !c.get_tensor(p.bank) || !c.get_tensor(p.aux))
    return internal_error(
        fmt::format("handoff payload of forward {} truncated in its tensors", h.forward));
  if (c.remaining() != 0)
    return internal_error(fmt::format("handoff payload of forward {} has {} trailing bytes",
                                      h.forward, c.remaining()));
  return p;
}

Result<HandoffPayload> decode_payload(const std::vector<std::byte>& header, const Tensor& body,
                                      const PayloadExpectation& e) {
  Cursor c(header);
  ASSIGN_OR_RETURN(Header h, read_header(c, e));
  if (c.remaining() != 0)
    return internal_error(fmt::format("handoff payload of forward {}: header has {} trailing bytes",
                                      h.forward, c.remaining()));
  const int64_t n_aux = static_cast<int64_t>(h.aux_ids.size());
  const size_t want = payload_body_bytes(h.tokens, h.hidden, h.rows, h.aux_ids.size());
  if (body.nbytes() != want)
    return internal_error(
        fmt::format("handoff payload of forward {}: body of {} bytes, the header says {}",
                    h.forward, body.nbytes(), want));
  HandoffPayload p;
  p.forward = h.forward;
  p.aux_ids = h.aux_ids;
  const Device d = body.device();
  p.hidden = Tensor::for_overwrite(DType::kBF16, {h.tokens, h.hidden}, d);
  p.bank = Tensor::for_overwrite(DType::kBF16, {h.tokens, h.rows, h.hidden}, d);
  p.aux = Tensor::for_overwrite(DType::kBF16, {h.tokens, n_aux * h.hidden}, d);
  size_t at = 0;
  for (Tensor* t : {&p.hidden, &p.bank, &p.aux}) {
    copy_tensor_runs(*t, 0, t->nbytes(), body, at, t->nbytes(), t->nbytes(), 1);
    at += t->nbytes();
  }
  return p;
}

}  // namespace splitcheck
