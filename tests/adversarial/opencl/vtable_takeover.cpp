// Adversarial candidate. Class: a takeover of the worker's own control flow between the inputs' arrival and go
// (issue 24, classes 1 and 2).
// Cheat: the first call is honest. Before it returns, kwb_run finds the worker's backend object in its own address
// space (the worker's stack holds a pointer to it; RTTI names its vtable) and points the object at a copy of its
// vtable whose upload is the candidate's. From then on, every call's uploads pass through the candidate before go:
// it keeps the inputs' host bytes, and when the output's poison is uploaded it computes the whole RMSNorm on the host
// and uploads that instead. kwb_run then returns at once: the window from go to done holds two markers and a finish.
// No OpenCL command of the candidate's is enqueued outside a call, the driver's dispatch table is untouched, and the
// output the parent reads back is right.
// Against a worker that calls its backend through the object's vtable, the outputs are right, the check passes, and
// compare against the honest fused kernel reads +24% PASS (the device never runs a kernel; the host loop is cheaper
// than a launch), although the host work before go is there to see.
// Defense: from a run request to the outputs' read-back the worker calls its backend only through a call path bound
// to the backend's own functions and kept on a sealed, read-only page before the implementation is loaded
// (backend/backend.h, CallPath): the rewritten vtable pointer changes nothing the worker calls.
// Expected: check FAIL at the second call (the output is never computed; the parent's poison comes back).
#include <CL/cl.h>
#include <kwb/kernel.h>

#include "rmsnorm_opencl_common.h"

#include <link.h>
#include <unistd.h>

#include <cmath>
#include <csetjmp>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

KWB_CANDIDATE_ABI

extern "C" void* __libc_stack_end;  // glibc's note of where the main thread's stack began

namespace {

using namespace corpus_cl;

Fused g_fused;

// The Backend interface's slots in declaration order (src/backend/backend.h: two for the virtual destructor, then
// call_path, id, kind, device, description, fill_context, stream, sandbox_needs, host_memory, create_buffer,
// create_input_buffer, release_buffer, upload, ..., collect_call).
constexpr size_t k_upload_slot = 14;
constexpr size_t k_slots = 22;

using UploadFn = void (*)(void* self, int id, const void* host, size_t nbytes);
UploadFn g_upload = nullptr;
void* g_fake_vtable[k_slots + 2] = {};
bool g_installed = false;

// The call in flight, as the uploads show it: x, then weight, then y's poison.
const float* g_x = nullptr;
size_t g_x_bytes = 0;
const float* g_weight = nullptr;
size_t g_weight_bytes = 0;
float g_eps = 1e-6f;
int g_uploads = 0;
std::vector<float> g_result;

void hooked_upload(void* self, int id, const void* host, size_t nbytes) {
  const int position = g_uploads++ % 3;
  if (position == 0) {
    g_x = static_cast<const float*>(host);
    g_x_bytes = nbytes;
  } else if (position == 1) {
    g_weight = static_cast<const float*>(host);
    g_weight_bytes = nbytes;
  } else if (g_x != nullptr && g_weight != nullptr && g_weight_bytes > 0 && nbytes == g_x_bytes) {
    const size_t cols = g_weight_bytes / sizeof(float);
    const size_t rows = g_x_bytes / sizeof(float) / cols;
    g_result.resize(rows * cols);
    for (size_t r = 0; r < rows; ++r) {
      const float* xr = g_x + r * cols;
      float sum = 0.0f;
      for (size_t c = 0; c < cols; ++c) sum += xr[c] * xr[c];
      const float inv = 1.0f / std::sqrt(sum / static_cast<float>(cols) + g_eps);
      for (size_t c = 0; c < cols; ++c) g_result[r * cols + c] = xr[c] * inv * g_weight[c];
    }
    g_upload(self, id, g_result.data(), nbytes);  // the result, where the poison should have gone
    return;
  }
  g_upload(self, id, host, nbytes);
}

// Reads of words that may not be mapped, without a fault: the kernel copies the word into a pipe made in kwb_setup
// (write fails with EFAULT where nothing is mapped) and it is read back. (A SIGSEGV handler of its own that jumps
// back, as this probe once used, can no longer be set inside the sandbox: worker/sandbox.cpp.)
int g_pipe[2] = {-1, -1};

bool readable_word(const void* p, uintptr_t& out) {
  if (g_pipe[1] < 0 || ::write(g_pipe[1], p, sizeof out) != static_cast<ssize_t>(sizeof out)) return false;
  return ::read(g_pipe[0], &out, sizeof out) == static_cast<ssize_t>(sizeof out);
}

// The main program's loaded, readable segments.
struct Segment {
  uintptr_t begin, end;
};
int collect_segments(dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::vector<Segment>*>(data);
  if (!out->empty() || (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0')) return 1;  // the first is ours
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_R)) {
      out->push_back({info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz});
    }
  }
  return 1;
}

uintptr_t find_word(const std::vector<Segment>& segs, uintptr_t value) {
  for (const Segment& s : segs) {
    for (uintptr_t a = (s.begin + 7) & ~uintptr_t{7}; a + 8 <= s.end; a += 8) {
      if (*reinterpret_cast<const uintptr_t*>(a) == value) return a;
    }
  }
  return 0;
}

// The address of OpenClBackend's vtable (what its objects' first word holds), from its RTTI name.
uintptr_t backend_vptr() {
  std::vector<Segment> segs;
  dl_iterate_phdr(collect_segments, &segs);
  constexpr std::string_view name = "N3kwb12_GLOBAL__N_113OpenClBackendE";
  for (const Segment& s : segs) {
    const std::string_view mem(reinterpret_cast<const char*>(s.begin), s.end - s.begin);
    for (size_t at = mem.find(name); at != std::string_view::npos; at = mem.find(name, at + 1)) {
      for (uintptr_t str : {s.begin + at, s.begin + at - 1}) {  // GCC marks local types' names with a leading '*'
        const uintptr_t name_slot = find_word(segs, str);
        if (name_slot == 0) continue;
        const uintptr_t typeinfo = name_slot - 8;
        const uintptr_t vtable_rtti = find_word(segs, typeinfo);
        if (vtable_rtti != 0) return vtable_rtti + 8;
      }
    }
  }
  return 0;
}

// Walks the main thread's stack from here to its top for a pointer to an object whose vtable is the backend's, and points that
// object at the candidate's copy.
void take_over() {
  const uintptr_t vptr = backend_vptr();
  if (vptr == 0) return;
  // The top of the main thread's stack, as glibc noted it at start (pthread_getattr_np would read /proc, which the
  // sandbox denies).
  const uintptr_t top = reinterpret_cast<uintptr_t>(__libc_stack_end);
  int marker = 0;
  uintptr_t here = reinterpret_cast<uintptr_t>(&marker) & ~uintptr_t{7};
  for (; here + 8 <= top; here += 8) {
    const uintptr_t candidate = *reinterpret_cast<const uintptr_t*>(here);
    if (candidate < 4096 || (candidate & 7) != 0) continue;
    uintptr_t first = 0;
    if (!readable_word(reinterpret_cast<const void*>(candidate), first) || first != vptr) continue;
    const auto* real = reinterpret_cast<void* const*>(vptr - 16);
    for (size_t i = 0; i < k_slots + 2; ++i) g_fake_vtable[i] = real[i];
    g_upload = reinterpret_cast<UploadFn>(real[2 + k_upload_slot]);
    g_fake_vtable[2 + k_upload_slot] = reinterpret_cast<void*>(&hooked_upload);
    *reinterpret_cast<void**>(candidate) = &g_fake_vtable[2];
    g_installed = true;
    return;
  }
}

}  // namespace

extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (::pipe(g_pipe) != 0) g_pipe[0] = g_pipe[1] = -1;
  return g_fused.setup(ctx);
}

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rmsnorm> p = unpack(*call);
  if (!p) return 1;
  g_eps = p->eps;
  if (g_installed) return 0;  // the output went up before go
  if (const int rc = g_fused.launch(*p, static_cast<cl_command_queue>(call->stream)); rc != 0) return rc;
  take_over();
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) { g_fused.release(); }
