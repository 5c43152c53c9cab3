// cpu: tensors are the parent's host memory, shared with the worker; there is no queue, so a call is finished when
// kwb_run returns, and the host clock is the only clock.
#include "backend/backend.h"

namespace kwb {

namespace {

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(const BackendOptions&) {}

  BackendKind id() const override { return BackendKind::cpu; }
  CallPath call_path() override { return bind_call_path(this); }
  kwb_backend kind() const override { return KWB_BACKEND_CPU; }
  DLDevice device() const override { return DLDevice{kDLCPU, 0}; }
  std::string description() const override { return "host CPU"; }
  void* stream() const override { return nullptr; }
  void fill_context(kwb_context& ctx) const override {
    ctx.backend = KWB_BACKEND_CPU;
    ctx.device_context = nullptr;
    ctx.device = nullptr;
    ctx.stream = nullptr;
  }

  // Host memory: the buffer calls are never made (host_memory() is true).
  void* create_buffer(int, size_t) override { return nullptr; }
  void release_buffer(int) override {}
  void upload(int, const void*, size_t) override {}
  void download(int, void*, size_t) override {}
  bool matches(int, const void*, size_t) override { return true; }

  void prepare_call() override {}
  void begin_call() override {}
  void finish_call() override {}
  CallDeviceInfo collect_call() override { return {}; }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace kwb
