// Writes seed payloads for handoff_fuzz with the real encoder (encode_payload): a few
// shapes (tokens, hidden, bank rows, aux taps) with seeded bf16 contents, one file each.
//   handoff_seeds OUT_DIR
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "harness/engine/handoff.h"

namespace {

splitcheck::Tensor filled(const splitcheck::Shape& shape, uint16_t seed) {
  splitcheck::Tensor t = splitcheck::Tensor::zeros(splitcheck::DType::kBF16, shape);
  uint16_t* p = t.data<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<uint16_t>(seed * 40503u + i * 7u);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  struct Shape {
    int32_t forward;
    int64_t tokens, hidden, rows;
    std::vector<int32_t> aux;
  };
  const std::vector<Shape> shapes = {{0, 1, 4, 1, {}},
                                     {1, 2, 8, 2, {1}},
                                     {3, 3, 4, 1, {0, 2}},
                                     {7, 0, 4, 0, {}},
                                     {2, 4, 2, 3, {1, 2, 5}}};
  int n = 0;
  for (const Shape& s : shapes) {
    splitcheck::HandoffPayload p;
    p.forward = s.forward;
    p.hidden = filled({s.tokens, s.hidden}, static_cast<uint16_t>(n + 1));
    p.bank = filled({s.tokens, s.rows, s.hidden}, static_cast<uint16_t>(n + 11));
    p.aux_ids = s.aux;
    p.aux = filled({s.tokens, static_cast<int64_t>(s.aux.size()) * s.hidden},
                   static_cast<uint16_t>(n + 21));
    const std::vector<std::byte> bytes = splitcheck::encode_payload(p);
    const std::string path = std::string(argv[1]) + "/payload-" + std::to_string(n++) + ".bin";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
        std::fclose(f) != 0) {
      std::fprintf(stderr, "%s: cannot write\n", path.c_str());
      return 3;
    }
  }
  return 0;
}
