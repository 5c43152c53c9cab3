#include "worker/channel.h"
#include "util/json_text.h"

#include "util/error.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace kwb {

bool Channel::send(const nlohmann::json& message, std::span<const int> fds) {
  const std::string text = json_text(message);
  if (text.size() > k_max_message_bytes) throw InternalError("worker message too large");
  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control;
  if (!fds.empty()) {
    control.resize(CMSG_SPACE(sizeof(int) * fds.size()));
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    ssize_t n = ::sendmsg(m_fd.get(), &msg, MSG_NOSIGNAL);
    if (n >= 0) return true;
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET) return false;
    throw_system_error("sendmsg", __FILE__, __LINE__, errno);
  }
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
  iovec iov{m_buffer.data(), m_buffer.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 64)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(m_fd.get(), &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == ECONNRESET) n = 0;
  if (n < 0) throw_system_error("recvmsg", __FILE__, __LINE__, errno);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        r.fds.emplace_back(fd);
      }
    }
  }
  if (n == 0) {
    r.status = Status::closed;
    return r;
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
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
