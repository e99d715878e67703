// The comparator against its anchors (DESIGN.md, "Performance"): the default compare of
// two page-cached dumps (every byte read and compared, both files' digests verified in the
// same pass, on every core), the same on one thread, a compare that trusts equal digests
// (`--trust-digests`), mmap + memcmp of the same two files, and h5diff, all in one run, with the
// medians, the ratios and the comparator's peak RSS at the end.
//
//   SPLITCHECK_BENCH_BYTES=268435456 ./compare_benchmark   # size of each dump (default 1 GiB)
//   SPLITCHECK_BENCH_H5DIFF_REPS=3                         # h5diff repetitions (default 1)
//
// The two dumps are identical (the worst case for a full compare: every byte is read),
// generated once in a child process (so generation does not count toward the RSS),
// reused by every repetition and deleted at exit.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "harness/dump/compare.h"
#include "harness/dump/dump.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

size_t bench_bytes() {
  const char* env = std::getenv("SPLITCHECK_BENCH_BYTES");
  if (env == nullptr || *env == '\0') return size_t{1} << 30;
  return std::max<size_t>(std::strtoull(env, nullptr, 10), size_t{1} << 20);
}

long max_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The median of the repetitions' times (the machine is shared: medians, not minima).
double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The pair of dumps and the times of each method, printed when the program ends.
struct Fixture {
  fs::path dir;
  std::string a, b;
  size_t bytes = 0;
  std::vector<double> full_s, one_thread_s, trusted_s, memcmp_s, h5diff_s;
  long rss_before_kib = 0, rss_after_compare_kib = 0;
  bool ready = false;

  ~Fixture() {
    if (!ready) return;
    const double full = median(full_s), memcmp = median(memcmp_s), h5diff = median(h5diff_s);
    std::printf("\n--- comparator vs anchors, two page-cached dumps of %.1f MiB each ---\n",
                static_cast<double>(bytes) / (1 << 20));
    std::printf("medians of the repetitions (full %zu, memcmp %zu, h5diff %zu)\n", full_s.size(),
                memcmp_s.size(), h5diff_s.size());
    std::printf("verified full compare  %8.3f s  (every byte compared, both digests checked)\n",
                full);
    std::printf("same, on one thread    %8.3f s  (CompareOptions::threads = 1; default: %u)\n",
                median(one_thread_s), std::max(1u, std::thread::hardware_concurrency()));
    std::printf("trusted-digest compare %8.3f s  (--trust-digests: nothing read)\n",
                median(trusted_s));
    std::printf("mmap + memcmp          %8.3f s\n", memcmp);
    if (h5diff >= 0) {
      std::printf("h5diff                 %8.3f s\n", h5diff);
    } else {
      std::printf("h5diff                 (not run: /usr/bin/h5diff absent)\n");
    }
    std::printf("ratio compare/memcmp   %8.2f  (target <= 1.5)\n", full / memcmp);
    if (h5diff >= 0) std::printf("ratio h5diff/compare   %8.2f  (target >= 8)\n", h5diff / full);
    std::printf("comparator peak RSS    %8.1f MiB (process before comparing: %.1f MiB)\n",
                rss_after_compare_kib / 1024.0, rss_before_kib / 1024.0);
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

Fixture& fixture() {
  static Fixture f;
  if (f.ready) return f;
  f.bytes = bench_bytes();
  f.dir = fs::temp_directory_path() / ("splitcheck_compare_bench_" + std::to_string(::getpid()));
  fs::create_directories(f.dir);
  f.a = (f.dir / "a.h5").string();
  f.b = (f.dir / "b.h5").string();
  // Datasets like a large dump's: bf16 [2048, 4096] (16 MiB), the last one cut to size.
  pid_t child = fork();
  if (child == 0) {
    const int64_t rows = 2048, hidden = 4096;
    const size_t per = static_cast<size_t>(rows * hidden) * 2;
    for (const std::string& path : {f.a, f.b}) {
      DumpHeader h;
      h.created = "2024-01-01T00:00:00Z";
      h.level = "full";
      Result<DumpWriter> w = DumpWriter::create(path, h);
      if (!w.is_ok()) _exit(1);
      uint64_t state = 0x9E3779B97F4A7C15ULL;
      size_t left = f.bytes;
      for (int i = 0; left > 0; ++i) {
        int64_t r = static_cast<int64_t>(std::min(per, left) / (hidden * 2));
        if (r == 0) break;
        Tensor t = Tensor::zeros(DType::kBF16, {r, hidden});
        auto* p = t.data<uint64_t>();
        for (int64_t k = 0; k < r * hidden / 4; ++k) {
          state ^= state << 13;
          state ^= state >> 7;
          state ^= state << 17;
          p[k] = state;
        }
        std::string name = "/forward/0/layers/" + std::to_string(i) + "/pre_attn";
        if (!w->write(name, t).is_ok()) _exit(1);
        left -= static_cast<size_t>(r * hidden * 2);
      }
      if (!w->finish().is_ok()) _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "compare_benchmark: could not write the dumps in %s\n", f.dir.c_str());
    std::exit(1);
  }
  f.rss_before_kib = max_rss_kib();
  f.ready = true;
  return f;
}

void BM_CompareFull(benchmark::State& state) {
  Fixture& f = fixture();
  const CompareOptions o;  // the default: read everything, verify both files' digests
  for (auto _ : state) {
    auto t0 = Clock::now();
    Result<CompareResult> r = compare_dumps(f.a, f.b, o);
    f.full_s.push_back(seconds_since(t0));
    if (!r.is_ok() || !r->equal() || r->datasets_unverified != 0 ||
        r->bytes_read != static_cast<int64_t>(2 * f.bytes))
      state.SkipWithError("compare failed");
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * f.bytes));
  f.rss_after_compare_kib = max_rss_kib();
}

void BM_CompareOneThread(benchmark::State& state) {
  Fixture& f = fixture();
  CompareOptions o;
  o.threads = 1;
  for (auto _ : state) {
    auto t0 = Clock::now();
    Result<CompareResult> r = compare_dumps(f.a, f.b, o);
    f.one_thread_s.push_back(seconds_since(t0));
    if (!r.is_ok() || !r->equal() || r->bytes_read != static_cast<int64_t>(2 * f.bytes))
      state.SkipWithError("compare failed");
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * f.bytes));
}

void BM_CompareTrustedDigests(benchmark::State& state) {
  Fixture& f = fixture();
  CompareOptions o;
  o.trust_digest = true;
  for (auto _ : state) {
    auto t0 = Clock::now();
    Result<CompareResult> r = compare_dumps(f.a, f.b, o);
    f.trusted_s.push_back(seconds_since(t0));
    if (!r.is_ok() || !r->equal() || r->bytes_read != 0) state.SkipWithError("compare failed");
    benchmark::DoNotOptimize(r);
  }
  f.rss_after_compare_kib = max_rss_kib();
}

void BM_MmapMemcmp(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) {
    auto t0 = Clock::now();
    int fa = ::open(f.a.c_str(), O_RDONLY), fb = ::open(f.b.c_str(), O_RDONLY);
    struct stat sa {
    }, sb{};
    fstat(fa, &sa);
    fstat(fb, &sb);
    size_t n = static_cast<size_t>(std::min(sa.st_size, sb.st_size));
    void* pa = mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fa, 0);
    void* pb = mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fb, 0);
    int c = std::memcmp(pa, pb, n);
    munmap(pa, n);
    munmap(pb, n);
    ::close(fa);
    ::close(fb);
    f.memcmp_s.push_back(seconds_since(t0));
    if (c != 0) state.SkipWithError("files differ");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * f.bytes));
}

void BM_H5diff(benchmark::State& state) {
  Fixture& f = fixture();
  if (!fs::exists("/usr/bin/h5diff")) {
    state.SkipWithError("/usr/bin/h5diff is absent");
    for (auto _ : state) {
    }
    return;
  }
  for (auto _ : state) {
    const std::string cmd = "/usr/bin/h5diff " + f.a + " " + f.b + " > /dev/null 2>&1";
    auto t0 = Clock::now();
    int rc = std::system(cmd.c_str());
    f.h5diff_s.push_back(seconds_since(t0));
    if (rc != 0) state.SkipWithError("h5diff reported a difference");
  }
}

int64_t h5diff_reps() {
  const char* env = std::getenv("SPLITCHECK_BENCH_H5DIFF_REPS");
  return env == nullptr || *env == '\0' ? 1 : std::max<int64_t>(1, std::atoll(env));
}

// Full compare first, so the peak RSS it leaves is the comparator's (memcmp maps whole
// files). Compare and memcmp repeat 5 times; h5diff SPLITCHECK_BENCH_H5DIFF_REPS times.
BENCHMARK(BM_CompareFull)->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompareOneThread)->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompareTrustedDigests)->Iterations(10)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MmapMemcmp)->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_H5diff)->Iterations(h5diff_reps())->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace splitcheck

BENCHMARK_MAIN();
