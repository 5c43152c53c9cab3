// Reader for callgrind's output files (the documented "callgrind format", valgrind's docs/callgrind-format).
// kwb asks for uncompressed names and positions (--compress-strings=no --compress-pos=no) but this reader also
// accepts the compressed "(id) name" form and relative positions, so a file from another valgrind setup parses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kwb {

// One function (object + name) of one dump: its own cost, and its cost including everything it called.
struct CallgrindFunction {
  std::string object;               // ob=: the ELF file the code came from
  std::string name;                 // fn=: demangled name as callgrind prints it
  std::vector<uint64_t> self;       // one value per event
  std::vector<uint64_t> inclusive;  // self + the inclusive cost of every call it made
  uint64_t times_called = 0;        // sum of calls= on arcs into it (0 for an entry point of the window)
};

// One call arc: `caller` called `callee` `count` times, costing `inclusive` in all (indices into functions).
struct CallgrindArc {
  size_t caller = 0;
  size_t callee = 0;
  uint64_t count = 0;
  std::vector<uint64_t> inclusive;
};

struct CallgrindDump {
  std::vector<std::string> events;        // events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
  std::vector<std::string> descriptions;  // desc: lines (cache geometry, timerange, trigger)
  std::string trigger;                    // "Client Request: kwb_run call 3", from desc: Trigger:
  std::vector<uint64_t> totals;           // totals: (else summary:), one value per event
  std::vector<CallgrindFunction> functions;
  std::vector<CallgrindArc> arcs;

  // The value of one event in a cost vector, 0 when the event was not collected.
  uint64_t event(const std::vector<uint64_t>& costs, std::string_view name) const;
  uint64_t total(std::string_view name) const { return event(totals, name); }
  // Sum, over every call arc into a function with this exact name (any object), of the arc's inclusive cost.
  std::vector<uint64_t> inclusive_calls_to(std::string_view function_name) const;
};

// Throws DataError naming the line when the text is not callgrind output.
CallgrindDump parse_callgrind(std::string_view text);

// "(anonymous namespace)::pass_square(float const*, float*, long)" -> "pass_square": the name a reader recognises.
std::string short_function_name(std::string_view name);

}  // namespace kwb
