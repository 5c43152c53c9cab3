#include "cli/commands.h"
#include "util/paths.h"
#include "worker/worker_process.h"

#include <fmt/format.h>

#include <iostream>

namespace kwb::cli {

std::string require_backend(BackendKind backend) {
  if (!is_device(backend)) return "";
  std::string device = probe_backend(worker_executable(), backend);
  std::cerr << fmt::format("kwb: backend {}: {}\n", backend, device);
  return device;
}

}  // namespace kwb::cli
