// Digests of bytes: SHA-256 for files and manifests, XXH64 for dataset contents, both
// computed by Debian's libraries (OpenSSL libcrypto and libxxhash).
//
// SHA-256 names goldens, scenarios and models (MANIFEST.json, dump headers). XXH64 is
// the fast per-dataset digest stored in every dump's `digest` attribute, written as
//   "xxh64:ef46db3751d8e999"
// A stored digest is a claim made by whoever wrote the file: readers recompute it over
// the bytes they read (DatasetDigestCheck) and refuse a file whose claim is false.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "kernels/status.h"

namespace splitcheck {

// Incremental SHA-256 (FIPS 180-4) through OpenSSL's EVP interface. Feed bytes with
// update(), then call hex() (or finish()) once. Move-only.
class Sha256 {
 public:
  Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  ~Sha256();
  // Appends bytes to the message.
  void update(std::span<const std::byte> bytes);
  // Finishes the message and returns the 32-byte digest; the object is spent afterwards.
  std::array<uint8_t, 32> finish();
  // finish() as 64 lowercase hex characters.
  std::string hex();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// SHA-256 of `bytes` as 64 lowercase hex characters; sha256_hex({}) is "e3b0c442...b855".
std::string sha256_hex(std::span<const std::byte> bytes);

// SHA-256 of a file's contents, read in blocks; an unreadable file is kInvalidInput
// naming the path.
Result<std::string> sha256_file(const std::string& path);

// Incremental XXH64 (libxxhash's streaming state, seed selectable). Streaming gives the
// same value as digest64() over the concatenated bytes. Move-only.
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  Xxh64(Xxh64&&) noexcept;
  Xxh64& operator=(Xxh64&&) noexcept;
  ~Xxh64();
  // Appends bytes to the message.
  void update(std::span<const std::byte> bytes);
  // The digest of everything appended so far (the state is left unchanged).
  uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// XXH64 of `bytes` with seed 0; digest64({}) == 0xEF46DB3751D8E999.
uint64_t digest64(std::span<const std::byte> bytes);

// A digest64 value as the dump's `digest` attribute: "xxh64:%016x".
std::string digest64_string(uint64_t digest);

// digest64_string(digest64(bytes)).
std::string digest64_hex(std::span<const std::byte> bytes);

// The value of a `digest` attribute: "xxh64:" and 16 hex digits (either case); nullopt
// for anything else.
std::optional<uint64_t> parse_digest64(const std::string& text);

// Checks one dataset's stored digest against the bytes a reader streams through it, in
// row-major order, in the same pass that uses them:
//
//   DatasetDigestCheck check(file, "/forward/0/logits", stored_digest);
//   for each block: check.update(block);
//   RETURN_IF_ERROR(check.finish());   // kInvalidInput naming file and dataset
//
// An empty stored digest (the writer wrote none) checks nothing. Call finish() only
// after every byte of the dataset went through update().
class DatasetDigestCheck {
 public:
  // `stored` must already be a valid digest string (DumpReader::open checks that).
  DatasetDigestCheck(std::string file, std::string dataset, const std::string& stored);
  // Whether the dataset carries a digest to check.
  bool active() const { return expected_.has_value(); }
  // Appends bytes of the dataset.
  void update(std::span<const std::byte> bytes) {
    if (active()) hash_.update(bytes);
  }
  // OK when the bytes match the stored digest (or there is none); otherwise
  // kInvalidInput: "<file>: dataset <path>: stored digest xxh64:... but its bytes hash
  // to xxh64:... (corrupt or edited file)".
  Status finish() const;

 private:
  std::string file_, dataset_;
  std::optional<uint64_t> expected_;
  Xxh64 hash_;
};

}  // namespace splitcheck
