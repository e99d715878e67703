// Digests of bytes: SHA-256 for files and manifests, XXH64 for dataset contents.
//
// SHA-256 names goldens, scenarios and models (MANIFEST.json, dump headers). XXH64 is
// the fast per-dataset digest stored in every dump's `digest` attribute, written as
//   "xxh64:ef46db3751d8e999"
// so two datasets with equal digests, dtypes and shapes are taken as equal without
// reading their bytes (CompareOptions::trust_digest).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kernels/status.h"

namespace splitcheck {

// Incremental SHA-256 (FIPS 180-4). Feed bytes with update(), then call hex() once.
class Sha256 {
 public:
  Sha256();
  // Appends bytes to the message.
  void update(std::span<const std::byte> bytes);
  // Finishes the message and returns the 32-byte digest; the object is spent afterwards.
  std::array<uint8_t, 32> finish();
  // finish() as 64 lowercase hex characters.
  std::string hex();

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// SHA-256 of `bytes` as 64 lowercase hex characters; sha256_hex({}) is "e3b0c442...b855".
std::string sha256_hex(std::span<const std::byte> bytes);

// SHA-256 of a file's contents, read in blocks; an unreadable file is kInvalidInput
// naming the path.
Result<std::string> sha256_file(const std::string& path);

// Incremental XXH64 (the xxHash 64-bit algorithm, seed selectable). Streaming gives the
// same value as digest64() over the concatenated bytes.
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  // Appends bytes to the message.
  void update(std::span<const std::byte> bytes);
  // The digest of everything appended so far (the state is left unchanged).
  uint64_t digest() const;

 private:
  uint64_t seed_;
  std::array<uint64_t, 4> acc_;
  std::array<uint8_t, 32> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// XXH64 of `bytes` with seed 0; digest64({}) == 0xEF46DB3751D8E999.
uint64_t digest64(std::span<const std::byte> bytes);

// A digest64 value as the dump's `digest` attribute: "xxh64:%016x".
std::string digest64_string(uint64_t digest);

// digest64_string(digest64(bytes)).
std::string digest64_hex(std::span<const std::byte> bytes);

}  // namespace splitcheck
