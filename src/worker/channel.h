// One end of the parent <-> worker socket. SOCK_SEQPACKET keeps message boundaries, so every message is one JSON
// document; buffers travel as file descriptors (SCM_RIGHTS), never as copies inside messages.
#pragma once

#include "util/fd.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <span>
#include <vector>

namespace kwb {

inline constexpr size_t k_max_message_bytes = 1 << 20;

class Channel {
public:
  Channel() = default;
  explicit Channel(UniqueFd fd) : m_fd(std::move(fd)) {}

  enum class Status { message, closed, timeout, malformed };
  struct Received {
    Status status = Status::closed;
    nlohmann::json message;
    std::vector<UniqueFd> fds;
    std::string error;  // for malformed
  };

  // Returns false when the peer is gone (EPIPE/ECONNRESET); throws on anything else.
  bool send(const nlohmann::json& message, std::span<const int> fds = {});
  // deadline == nullopt waits forever.
  Received receive(std::optional<std::chrono::steady_clock::time_point> deadline);

  int fd() const { return m_fd.get(); }
  void close() { m_fd.reset(); }

private:
  UniqueFd m_fd;
  std::vector<char> m_buffer = std::vector<char>(k_max_message_bytes);
};

}  // namespace kwb
