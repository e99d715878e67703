#include "harness/dump/digest.h"

#include <openssl/evp.h>
#include <xxhash.h>
#if defined(__x86_64__)
// libxxhash's runtime dispatch: XXH3 on the widest vector unit the CPU has (AVX-512,
// AVX2, else SSE2), a few times the baseline's speed; the values are the same.
#include <xxh_x86dispatch.h>
#endif

#include <cstdio>
#include <fstream>
#include <new>
#include <stdexcept>
#include <vector>

namespace splitcheck {

// ---- SHA-256 (OpenSSL EVP) ----

struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
  ~State() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->ctx = EVP_MD_CTX_new();
  if (state_->ctx == nullptr) throw std::bad_alloc();
  if (EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("OpenSSL: cannot initialise SHA-256");
}
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;
Sha256::~Sha256() = default;

void Sha256::update(std::span<const std::byte> bytes) {
  if (!bytes.empty() && EVP_DigestUpdate(state_->ctx, bytes.data(), bytes.size()) != 1)
    throw std::runtime_error("OpenSSL: SHA-256 update failed");
}

std::array<uint8_t, 32> Sha256::finish() {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(state_->ctx, out.data(), &len) != 1 || len != out.size())
    throw std::runtime_error("OpenSSL: SHA-256 finish failed");
  return out;
}

std::string Sha256::hex() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t byte : finish()) {
    s += kHex[byte >> 4];
    s += kHex[byte & 15];
  }
  return s;
}

std::string sha256_hex(std::span<const std::byte> bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex();
}

Result<std::string> sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_input("cannot open " + path + " for reading");
  Sha256 h;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    std::streamsize got = in.gcount();
    if (got > 0) h.update(std::as_bytes(std::span<const char>(buf.data(), size_t(got))));
  }
  if (in.bad()) return invalid_input("error reading " + path);
  return h.hex();
}

// ---- XXH64 (libxxhash) ----

struct Xxh64::State {
  XXH64_state_t* st = nullptr;
  ~State() { XXH64_freeState(st); }
};

Xxh64::Xxh64(uint64_t seed) : state_(std::make_unique<State>()) {
  state_->st = XXH64_createState();
  if (state_->st == nullptr) throw std::bad_alloc();
  XXH64_reset(state_->st, seed);
}
Xxh64::Xxh64(Xxh64&&) noexcept = default;
Xxh64& Xxh64::operator=(Xxh64&&) noexcept = default;
Xxh64::~Xxh64() = default;

void Xxh64::update(std::span<const std::byte> bytes) {
  if (!bytes.empty()) XXH64_update(state_->st, bytes.data(), bytes.size());
}

uint64_t Xxh64::digest() const { return XXH64_digest(state_->st); }

uint64_t digest64(std::span<const std::byte> bytes) {
  return XXH64(bytes.empty() ? nullptr : bytes.data(), bytes.size(), 0);
}

std::string digest64_string(uint64_t digest) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "xxh64:%016llx", static_cast<unsigned long long>(digest));
  return buf;
}

std::string digest64_hex(std::span<const std::byte> bytes) {
  return digest64_string(digest64(bytes));
}

std::optional<uint64_t> parse_digest64(const std::string& text) {
  constexpr std::string_view kPrefix = "xxh64:";
  if (text.size() != kPrefix.size() + 16 || !text.starts_with(kPrefix)) return std::nullopt;
  uint64_t v = 0;
  for (size_t i = kPrefix.size(); i < text.size(); ++i) {
    const char c = text[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

// ---- XXH3-64 and the dataset digest of either algorithm ----

uint64_t digest3(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.empty() ? nullptr : bytes.data(), bytes.size());
}

std::string digest_string(const DatasetDigest& digest) {
  if (digest.algorithm == DigestAlgorithm::kXxh64) return digest64_string(digest.value);
  char buf[32];
  std::snprintf(buf, sizeof buf, "xxh3:%016llx", static_cast<unsigned long long>(digest.value));
  return buf;
}

std::string dataset_digest_hex(std::span<const std::byte> bytes) {
  return digest_string({DigestAlgorithm::kXxh3, digest3(bytes)});
}

std::optional<DatasetDigest> parse_digest(const std::string& text) {
  if (text.starts_with("xxh3:")) {
    // The same 16 hex digits as an xxh64 value, behind the other prefix.
    std::optional<uint64_t> v = parse_digest64("xxh64:" + text.substr(5));
    if (!v) return std::nullopt;
    return DatasetDigest{DigestAlgorithm::kXxh3, *v};
  }
  std::optional<uint64_t> v = parse_digest64(text);
  if (!v) return std::nullopt;
  return DatasetDigest{DigestAlgorithm::kXxh64, *v};
}

struct DatasetHasher::State {
  DigestAlgorithm algorithm;
  std::optional<Xxh64> xxh64;
  XXH3_state_t* xxh3 = nullptr;
  ~State() { XXH3_freeState(xxh3); }
};

DatasetHasher::DatasetHasher(DigestAlgorithm algorithm) : state_(std::make_unique<State>()) {
  state_->algorithm = algorithm;
  if (algorithm == DigestAlgorithm::kXxh64) {
    state_->xxh64.emplace(0);
    return;
  }
  state_->xxh3 = XXH3_createState();
  if (state_->xxh3 == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(state_->xxh3);
}
DatasetHasher::DatasetHasher(DatasetHasher&&) noexcept = default;
DatasetHasher& DatasetHasher::operator=(DatasetHasher&&) noexcept = default;
DatasetHasher::~DatasetHasher() = default;

void DatasetHasher::update(std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  if (state_->xxh3 != nullptr) {
    XXH3_64bits_update(state_->xxh3, bytes.data(), bytes.size());
  } else {
    state_->xxh64->update(bytes);
  }
}

DatasetDigest DatasetHasher::digest() const {
  if (state_->xxh3 != nullptr) return {DigestAlgorithm::kXxh3, XXH3_64bits_digest(state_->xxh3)};
  return {DigestAlgorithm::kXxh64, state_->xxh64->digest()};
}

// ---- DatasetDigestCheck ----

DatasetDigestCheck::DatasetDigestCheck(std::string file, std::string dataset,
                                       const std::string& stored)
    : file_(std::move(file)), dataset_(std::move(dataset)) {
  if (!stored.empty()) expected_ = parse_digest(stored);
  if (expected_) hash_.emplace(expected_->algorithm);
}

Status DatasetDigestCheck::finish() const {
  if (!active()) return Status::ok();
  const DatasetDigest got = hash_->digest();
  if (got == *expected_) return Status::ok();
  return invalid_input(file_ + ": dataset " + dataset_ + ": stored digest " +
                       digest_string(*expected_) + " but its bytes hash to " + digest_string(got) +
                       " (corrupt or edited file)");
}

}  // namespace splitcheck
