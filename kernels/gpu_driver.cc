#include "kernels/gpu_driver.h"

#include <dlfcn.h>

#include <cctype>
#include <fstream>
#include <sstream>

namespace splitcheck {
namespace {

// A dotted version: digits, then one or more ".digits" ("580.159.04", "550.54").
bool is_dotted_version(std::string_view w) {
  if (w.empty() || !std::isdigit(static_cast<unsigned char>(w.front())) ||
      !std::isdigit(static_cast<unsigned char>(w.back())))
    return false;
  int dots = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] == '.') {
      if (w[i - 1] == '.') return false;
      ++dots;
    } else if (!std::isdigit(static_cast<unsigned char>(w[i]))) {
      return false;
    }
  }
  return dots >= 1;
}

// NVML's answer, or empty. The library is the driver's (present wherever the driver is);
// its C entry points are declared here, so no NVML header is needed to build.
std::string nvml_driver_version() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return "";
  using InitFn = int (*)();
  using VersionFn = int (*)(char*, unsigned);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
  auto version = reinterpret_cast<VersionFn>(dlsym(lib, "nvmlSystemGetDriverVersion"));
  auto shutdown = reinterpret_cast<InitFn>(dlsym(lib, "nvmlShutdown"));
  std::string out;
  if (init != nullptr && version != nullptr && shutdown != nullptr && init() == 0) {
    char buf[96] = {};  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80
    if (version(buf, sizeof(buf)) == 0) out = buf;
    shutdown();
  }
  dlclose(lib);
  return out;
}

}  // namespace

std::string parse_nvidia_driver_version(std::string_view proc_text) {
  // The first line names the kernel module and its version; the first dotted version on
  // it is the driver's (the GCC line below it carries the compiler's).
  const std::string_view line = proc_text.substr(0, proc_text.find('\n'));
  if (line.find("NVRM version:") == std::string_view::npos) return "";
  std::istringstream words{std::string(line)};
  std::string w;
  while (words >> w)
    if (is_dotted_version(w)) return w;
  return "";
}

std::string nvidia_driver_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  if (f) {
    std::stringstream text;
    text << f.rdbuf();
    const std::string v = parse_nvidia_driver_version(text.str());
    if (!v.empty()) return v;
  }
  const std::string v = nvml_driver_version();
  if (!v.empty()) return v;
  return "unknown (no /proc/driver/nvidia/version, no answer from libnvidia-ml.so.1)";
}

}  // namespace splitcheck
