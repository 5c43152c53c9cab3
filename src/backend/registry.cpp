// make_backend: the one place that maps a backend name to its implementation file.
#include "backend/backend.h"

#include "util/error.h"

#include <fmt/format.h>

namespace kwb {

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options) {
  if (name == "cpu") return make_cpu_backend(options);
  if (name == "opencl") return make_opencl_backend(options);
  if (name == "cuda") return make_cuda_backend(options);
  throw UsageError(fmt::format("unknown backend '{}' (expected cpu, opencl or cuda)", name));
}

}  // namespace kwb
