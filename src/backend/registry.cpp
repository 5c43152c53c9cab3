// make_backend: the one place that maps a backend to its implementation file.
#include "backend/backend.h"

namespace kwb {

std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& options) {
  switch (kind) {
    case BackendKind::cpu:
      return make_cpu_backend(options);
    case BackendKind::opencl:
      return make_opencl_backend(options);
    case BackendKind::cuda:
      return make_cuda_backend(options);
  }
  return nullptr;  // unreachable: the switch covers every kind (-Wswitch)
}

}  // namespace kwb
