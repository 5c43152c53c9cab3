// Adversarial candidate. Class: work moved outside the timed window, into kwb's own uploads (issue 39, item 3).
// Cheat: PoCL keeps each device driver's table of operations (struct pocl_device_ops: read, write, run, ...) in
// writable memory of libpocl, and kwb's uploads before go run through its `write` entry on PoCL's own threads.
// kwb_setup finds every writable word of libpocl that holds pocl_driver_write and points it at a hook. The hook does
// the real write, and once x, weight and y of the coming call have all been written (y with kwb's poison; an input
// kwb hands over in place, its own mapping, counts as written), it computes RMSNorm on the host straight into y's
// device memory. kwb_run then launches nothing when the hook has done
// the call's work, and the fused kernel when it has not (the first call, before it knows the buffers). Every output
// is exact; the work is paid inside kwb's uploads, outside the window. It read +91% PASS against the fused kernel
// before kwb judged what happens outside the window.
// Defense: on device backends kwb measures each call's uploads and read-back (outside_wall_ns) and judges B's excess
// over A's against the gain B claims (stats/outside_window.h): INVALID, work_outside_window. The hook cannot hide its
// cost: it runs in the worker process while kwb waits for the uploads to finish.
// Expected: compare INVALID against the fused kernel (opencl), validate KEEP_BASELINE ab_work_outside_window; the
// same kernel without the hook (fused.cpp) reads its true figure.
#include <CL/cl.h>
#include <dlfcn.h>
#include <link.h>
#include <kwb/kernel.h>

#include "rmsnorm_opencl_common.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

using namespace corpus_cl;

// PoCL 3's driver interface, as far as the hook needs it: a memory identifier starts with the device pointer.
struct MemIdentifier {
  void* mem_ptr;
};
using WriteFn = void (*)(void* data, const void* src_host_ptr, MemIdentifier* dst_mem_id, cl_mem dst_buf,
                         size_t offset, size_t size);
using FreeFn = void (*)(cl_device_id device, cl_mem mem);

WriteFn g_real_write = nullptr;
FreeFn g_real_free = nullptr;
Fused g_fused;

// Where one of the call's tensors lives: its view as kwb hands it over, the buffer it is a view of and where in it.
struct Tensor {
  cl_mem view = nullptr;
  cl_mem parent = nullptr;
  size_t origin = 0;
  size_t bytes = 0;         // the view's size: a write of another size is another tensor (the next case's)
  float* device = nullptr;  // learnt from the upload
  bool written = false;     // since the last kwb_run
};
struct Shapes {
  Tensor x, weight, y;
  int64_t rows = 0, cols = 0;
  float eps = 1e-6f;
  bool known = false;     // kwb_run has seen the buffers
  bool computed = false;  // the hook did this call's work
} g_call;

// PoCL writes a sub-buffer through its parent at the sub-buffer's origin. Only that form is taken for a sub-buffer:
// a freed view's handle comes back as another buffer's (a guard write at offset 0 of the next case's y), and taking it
// would compute from the last case's pointers, long unmapped.
bool is(const Tensor& t, cl_mem buf, size_t offset, size_t size) {
  if (size != t.bytes) return false;
  if (t.parent != nullptr) return buf == t.parent && offset == t.origin;
  return buf == t.view && offset == 0;
}

void compute_on_host() {
  const float* x = g_call.x.device;
  const float* w = g_call.weight.device;
  float* y = g_call.y.device;
  for (int64_t r = 0; r < g_call.rows; ++r) {
    const float* xr = x + r * g_call.cols;
    float sum = 0.0f;
    for (int64_t c = 0; c < g_call.cols; ++c) sum += xr[c] * xr[c];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(g_call.cols) + g_call.eps);
    for (int64_t c = 0; c < g_call.cols; ++c) y[r * g_call.cols + c] = xr[c] * inv * w[c];
  }
}

void hook_write(void* data, const void* src, MemIdentifier* dst, cl_mem buf, size_t offset, size_t size) {
  g_real_write(data, src, dst, buf, offset, size);
  if (!g_call.known || dst == nullptr) return;
  for (Tensor* t : {&g_call.x, &g_call.weight, &g_call.y}) {
    if (!is(*t, buf, offset, size)) continue;
    t->device = reinterpret_cast<float*>(static_cast<char*>(dst->mem_ptr) + offset);
    t->written = true;
  }
  if (g_call.x.written && g_call.weight.written && g_call.y.written && !g_call.computed) {
    compute_on_host();  // over kwb's poison, before go
    g_call.computed = true;
  }
}

// A buffer of the call freed (kwb ends a case: its views, their parent, an input's own mapping go) makes every
// pointer the hook learnt stale: it forgets them until kwb_run names the next case's buffers. Without this the hook
// computed from the last case's device memory when a freed handle came back as the next case's, and crashed.
void hook_free(cl_device_id device, cl_mem mem) {
  for (const Tensor* t : {&g_call.x, &g_call.weight, &g_call.y}) {
    if (mem != nullptr && (mem == t->view || mem == t->parent)) g_call.known = false;
  }
  g_real_free(device, mem);
}

// Every writable word of libpocl that holds pocl_driver_write (pocl_driver_free) now holds its hook.
int patch(dl_phdr_info* info, size_t, void*) {
  if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, "libpocl") == nullptr) return 0;
  // The GOT and the other relocated constants are read-only after loading (PT_GNU_RELRO): only what stays writable.
  uintptr_t relro_begin = 0, relro_end = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_GNU_RELRO) continue;
    relro_begin = info->dlpi_addr + ph.p_vaddr;
    relro_end = (relro_begin + ph.p_memsz + 4095) & ~uintptr_t{4095};
  }
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_W) == 0) continue;
    auto* words = reinterpret_cast<void**>(info->dlpi_addr + ph.p_vaddr);
    for (size_t k = 0; k < ph.p_memsz / sizeof(void*); ++k) {
      const auto at = reinterpret_cast<uintptr_t>(&words[k]);
      if (at >= relro_begin && at < relro_end) continue;
      if (words[k] == reinterpret_cast<void*>(g_real_write)) words[k] = reinterpret_cast<void*>(&hook_write);
      if (g_real_free != nullptr && words[k] == reinterpret_cast<void*>(g_real_free)) {
        words[k] = reinterpret_cast<void*>(&hook_free);
      }
    }
  }
  return 0;
}

Tensor locate(cl_mem view) {
  Tensor t;
  t.view = view;
  clGetMemObjectInfo(view, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof t.parent, &t.parent, nullptr);
  clGetMemObjectInfo(view, CL_MEM_OFFSET, sizeof t.origin, &t.origin, nullptr);
  clGetMemObjectInfo(view, CL_MEM_SIZE, sizeof t.bytes, &t.bytes, nullptr);
  // An input kwb hands over in place (CL_MEM_USE_HOST_PTR: the worker's own mapping, on PoCL's CPU device) is never
  // uploaded: its bytes are already where the buffer says, so the hook needs only y's upload to start.
  void* host = nullptr;
  if (clGetMemObjectInfo(view, CL_MEM_HOST_PTR, sizeof host, &host, nullptr) == CL_SUCCESS && host != nullptr) {
    t.device = static_cast<float*>(host);
    t.written = true;
  }
  return t;
}

}  // namespace

extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (const int rc = g_fused.setup(ctx); rc != 0) return rc;
  void* pocl = ::dlopen("libpocl.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (pocl != nullptr) {
    g_real_write = reinterpret_cast<WriteFn>(::dlsym(pocl, "pocl_driver_write"));
    g_real_free = reinterpret_cast<FreeFn>(::dlsym(pocl, "pocl_driver_free"));
  }
  if (g_real_write != nullptr) dl_iterate_phdr(patch, nullptr);
  return 0;
}

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rmsnorm> p = unpack(*call);
  if (!p) return 1;
  const bool done = g_call.known && g_call.computed && p->y == g_call.y.view && p->x == g_call.x.view &&
                    p->weight == g_call.weight.view && p->rows == g_call.rows && p->cols == g_call.cols;
  // What the next call's uploads will be for: kwb keeps a visit's buffers from call to call.
  g_call.x = locate(p->x);
  g_call.weight = locate(p->weight);
  g_call.y = locate(p->y);
  g_call.rows = p->rows;
  g_call.cols = p->cols;
  g_call.eps = p->eps;
  g_call.known = true;
  g_call.computed = false;
  if (done) return 0;  // the hook wrote y while kwb uploaded its poison
  return g_fused.launch(*p, static_cast<cl_command_queue>(call->stream));
}

extern "C" KWB_EXPORT void kwb_teardown(void) { g_fused.release(); }
