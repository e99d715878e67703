// Digest test vectors: FIPS 180-4 examples for SHA-256, the xxHash reference values for
// XXH64, and streaming == one-shot for both.
#include "harness/dump/digest.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string_view>
#include <vector>

namespace splitcheck {
namespace {

std::span<const std::byte> bytes_of(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

TEST(DigestTest, Sha256KnownVectors) {
  EXPECT_EQ(sha256_hex({}), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(bytes_of("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(bytes_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(DigestTest, Sha256MillionAStreamed) {
  Sha256 h;
  std::string block(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.update(bytes_of(block));
  EXPECT_EQ(h.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(DigestTest, Xxh64KnownVectors) {
  EXPECT_EQ(digest64({}), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(digest64(bytes_of("a")), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(digest64(bytes_of("abc")), 0x44BC2CF5AD770999ULL);
  // 39 bytes: exercises the 32-byte stripe loop and every tail length class.
  EXPECT_EQ(digest64(bytes_of("Nobody inspects the spammish repetition")), 0xFBCEA83C8A378BF1ULL);
  EXPECT_EQ(digest64_hex({}), "xxh64:ef46db3751d8e999");
  EXPECT_EQ(digest64_string(0x1), "xxh64:0000000000000001");
}

TEST(DigestTest, Xxh3KnownVectorsAndTheAttributeOfEachAlgorithm) {
  // Values from the reference implementation (python3-xxhash's xxh3_64_intdigest).
  EXPECT_EQ(digest3({}), 0x2D06800538D394C2ULL);
  EXPECT_EQ(digest3(bytes_of("a")), 0xE6C632B61E964E1FULL);
  EXPECT_EQ(digest3(bytes_of("abc")), 0x78AF5F94892F3950ULL);
  EXPECT_EQ(digest3(bytes_of("Nobody inspects the spammish repetition")), 0x6CB00603B5CC47E9ULL);
  EXPECT_EQ(dataset_digest_hex({}), "xxh3:2d06800538d394c2");
  EXPECT_EQ(parse_digest("xxh3:2D06800538D394C2"),
            (DatasetDigest{DigestAlgorithm::kXxh3, 0x2D06800538D394C2ULL}));
  EXPECT_EQ(parse_digest("xxh64:ef46db3751d8e999"),
            (DatasetDigest{DigestAlgorithm::kXxh64, 0xEF46DB3751D8E999ULL}));
  EXPECT_EQ(digest_string({DigestAlgorithm::kXxh64, 1}), "xxh64:0000000000000001");
  for (const char* bad : {"xxh3:2d06800538d394c", "xxh3:2d06800538d394c2a", "xxh3-2d06800538d394c2",
                          "xxh3:2d06800538d394cg", "xxh128:2d06800538d394c2", ""})
    EXPECT_FALSE(parse_digest(bad).has_value()) << bad;
}

TEST(DigestTest, DatasetDigestCheckUsesTheAlgorithmTheStoredDigestNames) {
  const auto abc = bytes_of("abc");
  for (const std::string& stored :
       {std::string("xxh3:78af5f94892f3950"), std::string("xxh64:44bc2cf5ad770999")}) {
    DatasetDigestCheck ok("f.h5", "/x", stored);
    ok.update(abc);
    EXPECT_TRUE(ok.finish().is_ok()) << stored;
  }
  // The XXH64 value behind the xxh3 prefix is a false claim.
  DatasetDigestCheck swapped("f.h5", "/x", "xxh3:44bc2cf5ad770999");
  swapped.update(abc);
  const Status st = swapped.finish();
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("f.h5: dataset /x: stored digest xxh3:44bc2cf5ad770999 but its "
                              "bytes hash to xxh3:78af5f94892f3950"),
            std::string::npos)
      << st.message();
}

TEST(DigestTest, StreamingMatchesOneShotForEverySplit) {
  std::mt19937 rng(7);
  std::vector<std::byte> data(300);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  const std::span<const std::byte> all(data);
  const uint64_t xxh = digest64(all);
  const std::string sha = sha256_hex(all);
  for (size_t split = 0; split <= data.size(); split += 7) {
    Xxh64 x;
    x.update(all.first(split));
    x.update(all.subspan(split));
    EXPECT_EQ(x.digest(), xxh) << "split " << split;
    Sha256 s;
    s.update(all.first(split));
    s.update(all.subspan(split));
    EXPECT_EQ(s.hex(), sha) << "split " << split;
  }
  Xxh64 bytewise;
  for (std::byte b : data) bytewise.update(std::span<const std::byte>(&b, 1));
  EXPECT_EQ(bytewise.digest(), xxh);
  // XXH3 streams through an internal 256-byte buffer: cuts around it and bytewise.
  const uint64_t x3 = digest3(all);
  for (size_t split = 0; split <= data.size(); split += 5) {
    DatasetHasher h(DigestAlgorithm::kXxh3);
    h.update(all.first(split));
    h.update(all.subspan(split));
    EXPECT_EQ(h.digest(), (DatasetDigest{DigestAlgorithm::kXxh3, x3})) << "split " << split;
  }
  DatasetHasher h3(DigestAlgorithm::kXxh3), h64(DigestAlgorithm::kXxh64);
  for (std::byte b : data) {
    h3.update(std::span<const std::byte>(&b, 1));
    h64.update(std::span<const std::byte>(&b, 1));
  }
  EXPECT_EQ(h3.digest().value, x3);
  EXPECT_EQ(h64.digest(), (DatasetDigest{DigestAlgorithm::kXxh64, xxh}));
}

TEST(DigestTest, Sha256FileAndMissingFile) {
  auto path = std::filesystem::temp_directory_path() /
              ("splitcheck_digest_test_" + std::to_string(::getpid()));
  {
    std::ofstream out(path, std::ios::binary);
    out << "abc";
  }
  Result<std::string> h = sha256_file(path.string());
  ASSERT_TRUE(h.is_ok()) << h.status().message();
  EXPECT_EQ(*h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::filesystem::remove(path);
  Result<std::string> missing = sha256_file(path.string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(missing.status().message().find(path.string()), std::string::npos);
}

}  // namespace
}  // namespace splitcheck
