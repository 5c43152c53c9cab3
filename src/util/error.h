// Errors and exit codes. Expected failures (a candidate that crashes, a case that mismatches) are values recorded
// in results; exceptions are for what stops a verb: bad input, unavailable backend, internal faults.
#pragma once

#include <stdexcept>
#include <string>

namespace kwb {

// sysexits-style codes (sysexits.h), each listed with what it means in docs/cli.md, "Exit codes".
enum class ExitCode : int {
  ok = 0,        // success / KEEP_CANDIDATE / check passed
  rejected = 1,  // KEEP_BASELINE or check failed
  inconclusive = 2,
  invalid = 3,
  usage = 64,          // EX_USAGE
  data_error = 65,     // EX_DATAERR: bad manifest, bad candidate source
  unavailable = 69,    // EX_UNAVAILABLE: backend missing
  internal = 70,       // EX_SOFTWARE
  io_error = 74,       // EX_IOERR: cannot write the bundle
  lock_timeout = 75,   // EX_TEMPFAIL: the timing lock stayed busy past --lock-timeout; try again later
  not_authentic = 77,  // EX_NOPERM: keep of a bundle this machine's ledger did not record at the end of its run
};

class Error : public std::runtime_error {
public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), m_code(code) {}
  ExitCode code() const noexcept { return m_code; }

private:
  ExitCode m_code;
};

// Bad input data: the message names the file, the line when known, the field and the fix.
class DataError : public Error {
public:
  explicit DataError(const std::string& message) : Error(ExitCode::data_error, message) {}
};

// The task's own oracle failed (it did not build, load or answer, or answered outside its output's dtype): bad input
// like any DataError, and the task author's oracle to fix, never the implementation under test nor the shapes.
class OracleError : public DataError {
public:
  using DataError::DataError;
};

class UsageError : public Error {
public:
  explicit UsageError(const std::string& message) : Error(ExitCode::usage, message) {}
};

class InternalError : public Error {
public:
  explicit InternalError(const std::string& message) : Error(ExitCode::internal, message) {}
};

// A failed OS call: records the call's text, where it was made and errno.
[[noreturn]] void throw_system_error(const char* call_text, const char* file, int line, int saved_errno);

}  // namespace kwb

// Every OS call whose failure is fatal goes through this: `int fd = KWB_POSIX_CALL(::open(path, O_RDONLY));`.
// It retries on EINTR, so a signal delivered to the parent (SIGCHLD from a worker) never fails a call.
#define KWB_POSIX_CALL(expr)                                                           \
  ([&]() {                                                                             \
    for (;;) {                                                                         \
      auto kwb_result_ = (expr);                                                       \
      if (kwb_result_ != -1) return kwb_result_;                                       \
      if (errno != EINTR) ::kwb::throw_system_error(#expr, __FILE__, __LINE__, errno); \
    }                                                                                  \
  }())
