// cpu: tensors are host memory shared with the parent; there is no queue, so a call is finished when it returns.
#include "backend/backend.h"

#include "util/error.h"

#include <fmt/format.h>

namespace kwb {

namespace {

class CpuBackend final : public Backend {
public:
  const char* name() const override { return "cpu"; }
  kwb_backend kind() const override { return KWB_BACKEND_CPU; }
  DLDevice device() const override { return DLDevice{kDLCPU, 0}; }
  void* stream() const override { return nullptr; }
  void fill_context(kwb_context& ctx) const override {
    ctx.backend = KWB_BACKEND_CPU;
    ctx.device_context = nullptr;
    ctx.device = nullptr;
    ctx.stream = nullptr;
  }
  void synchronize() override {}
};

}  // namespace

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return std::make_unique<CpuBackend>();
  if (name == "opencl" || name == "cuda") {
    throw Error(ExitCode::unavailable, fmt::format("backend '{}' is not built into this kwb yet", name));
  }
  throw UsageError(fmt::format("unknown backend '{}' (expected cpu, opencl or cuda)", name));
}

}  // namespace kwb
