#include "worker/channel.h"
#include "util/json_text.h"

#include "util/error.h"
#include "util/fd_passing.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace kwb {

bool Channel::send(const nlohmann::json& message, std::span<const int> fds) {
  const std::string text = json_text(message);
  if (text.size() > k_max_message_bytes) throw InternalError("worker message too large");
  if (send_with_fds(m_fd.get(), text.data(), text.size(), fds) >= 0) return true;
  if (errno == EPIPE || errno == ECONNRESET) return false;
  throw_system_error("sendmsg", __FILE__, __LINE__, errno);
}

Channel::Received Channel::receive(std::optional<std::chrono::steady_clock::time_point> deadline) {
  Received r;
  for (;;) {
    int timeout_ms = -1;
    if (deadline) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        r.status = Status::timeout;
        return r;
      }
      timeout_ms = static_cast<int>(std::min<long long>(left.count(), 1 << 30));
    }
    pollfd p{m_fd.get(), POLLIN, 0};
    int pr = ::poll(&p, 1, timeout_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) throw_system_error("poll", __FILE__, __LINE__, errno);
    if (pr == 0) continue;  // re-evaluates the deadline
    break;
  }
  int flags = 0;
  ssize_t n = receive_with_fds(m_fd.get(), m_buffer.data(), m_buffer.size(), r.fds, 0, &flags);
  if (n < 0 && errno == ECONNRESET) n = 0;
  if (n < 0) throw_system_error("recvmsg", __FILE__, __LINE__, errno);
  if (n == 0) {
    r.status = Status::closed;
    return r;
  }
  if ((flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    r.status = Status::malformed;
    r.error = "message truncated";
    return r;
  }
  r.message = nlohmann::json::parse(m_buffer.data(), m_buffer.data() + n, nullptr, false);
  if (r.message.is_discarded() || !r.message.is_object() || !r.message.contains("type") ||
      !r.message["type"].is_string()) {
    r.status = Status::malformed;
    r.error = "not a JSON object with a string type";
    return r;
  }
  r.status = Status::message;
  return r;
}

}  // namespace kwb
