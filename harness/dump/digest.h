// Digests of bytes: SHA-256 for files and manifests, XXH3-64 and XXH64 for dataset
// contents, computed by Debian's libraries (OpenSSL libcrypto and libxxhash).
//
// SHA-256 names goldens, scenarios and models (MANIFEST.json, dump headers). The fast
// per-dataset digest stored in every dump's `digest` attribute names its algorithm:
//   "xxh3:2d06800538d394c2"    format_version 2 (what this build writes)
//   "xxh64:ef46db3751d8e999"   format_version 1 (older dumps, the Python writer)
// XXH3-64 hashes about 1.6x faster than XXH64 on one core, which is what lets a verified
// compare keep up with memcmp (DESIGN.md, "Performance").
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

// The algorithm of a dataset digest, named by the prefix of its `digest` attribute.
enum class DigestAlgorithm { kXxh64, kXxh3 };

// A parsed `digest` attribute.
struct DatasetDigest {
  DigestAlgorithm algorithm = DigestAlgorithm::kXxh3;
  uint64_t value = 0;
  bool operator==(const DatasetDigest&) const = default;
};

// XXH3-64 of `bytes` with seed 0 (libxxhash's XXH3_64bits); digest3({}) ==
// 0x2D06800538D394C2.
uint64_t digest3(std::span<const std::byte> bytes);

// A digest as the dump's `digest` attribute: "xxh3:%016x" or "xxh64:%016x".
std::string digest_string(const DatasetDigest& digest);

// The `digest` attribute this build writes for `bytes`: digest_string({kXxh3,
// digest3(bytes)}).
std::string dataset_digest_hex(std::span<const std::byte> bytes);

// The value of a `digest` attribute: "xxh3:" or "xxh64:" and 16 hex digits (either
// case); nullopt for anything else.
std::optional<DatasetDigest> parse_digest(const std::string& text);

// Incremental dataset digest of either algorithm: streaming gives the same value as the
// one-shot function over the concatenated bytes. Move-only.
class DatasetHasher {
 public:
  explicit DatasetHasher(DigestAlgorithm algorithm);
  DatasetHasher(DatasetHasher&&) noexcept;
  DatasetHasher& operator=(DatasetHasher&&) noexcept;
  ~DatasetHasher();
  // Appends bytes to the message.
  void update(std::span<const std::byte> bytes);
  // The digest of everything appended so far (the state is left unchanged).
  DatasetDigest digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

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
    if (hash_) hash_->update(bytes);
  }
  // OK when the bytes match the stored digest (or there is none); otherwise
  // kInvalidInput: "<file>: dataset <path>: stored digest xxh3:... but its bytes hash
  // to xxh3:... (corrupt or edited file)".
  Status finish() const;

 private:
  std::string file_, dataset_;
  std::optional<DatasetDigest> expected_;
  std::optional<DatasetHasher> hash_;
};

}  // namespace splitcheck
