// The device side of a worker: what the candidate's pointers and stream mean, and when a call is finished.
// One implementation per file; the worker owns exactly one backend for its lifetime.
#pragma once

#include "kwb/kernel.h"

#include <memory>
#include <string>

namespace kwb {

class Backend {
public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual kwb_backend kind() const = 0;
  virtual DLDevice device() const = 0;
  virtual void* stream() const = 0;
  virtual void fill_context(kwb_context& ctx) const = 0;
  // Runs inside the timed region after kwb_run returns: a call is finished only when all work it started is.
  virtual void synchronize() = 0;
};

// Throws Error(ExitCode::unavailable) naming what is missing.
std::unique_ptr<Backend> make_backend(const std::string& name);

}  // namespace kwb
