// The NVIDIA driver's own version string ("580.159.04"), as a GPU fingerprint records it
// beside the CUDA driver API version (cudaDriverGetVersion's 13000). Plain C++ (no CUDA
// headers): it reads the kernel module's /proc entry, or asks NVML when that is absent
// (libnvidia-ml.so.1, opened at run time, so nothing links against it).
#pragma once

#include <string>
#include <string_view>

namespace splitcheck {

// The driver version in the text of /proc/driver/nvidia/version ("NVRM version: NVIDIA
// UNIX x86_64 Kernel Module  580.159.04  Thu ..."), or empty when the text names none.
std::string parse_nvidia_driver_version(std::string_view proc_text);

// This machine's NVIDIA driver version: /proc/driver/nvidia/version, else NVML's
// nvmlSystemGetDriverVersion; "unknown (...)" saying why when neither answers.
std::string nvidia_driver_version();

}  // namespace splitcheck
