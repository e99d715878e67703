// splitmix64: the counter-based mixer behind generated weights and workloads. Its output
// is fixed by this code, unlike the standard library's distributions.
#pragma once

#include <cstdint>

namespace splitcheck {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace splitcheck
