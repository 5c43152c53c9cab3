#include "experiment/shim/loopback_bridge.h"

#include "experiment/generator_syscalls.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kwb::shim {
namespace {

bool send_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

int connect_proxy(const char* path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (std::strlen(path) >= sizeof address.sun_path) return -1;
  std::strcpy(address.sun_path, path);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One connection: the client's bytes to the proxy and the proxy's back, until the proxy has answered and closed (it
// serves one request per connection); a client that closes its side first still gets the answer.
void relay(int client, const char* proxy_path) {
  const int proxy = connect_proxy(proxy_path);
  if (proxy < 0) return;  // the attempt is over (the proxy is gone): the client sees its connection closed
  char buffer[64 * 1024];
  bool client_open = true;
  for (;;) {
    pollfd p[2] = {{client_open ? client : -1, POLLIN, 0}, {proxy, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[0].revents != 0) {
      const ssize_t n = ::recv(client, buffer, sizeof buffer, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        client_open = false;
        ::shutdown(proxy, SHUT_WR);
      } else if (!send_all(proxy, buffer, static_cast<std::size_t>(n))) {
        return;
      }
    }
    if (p[1].revents != 0) {
      const ssize_t n = ::recv(proxy, buffer, sizeof buffer, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || !send_all(client, buffer, static_cast<std::size_t>(n))) return;
    }
  }
}

[[noreturn]] void serve(int listener, const char* proxy_path) {
  (void)::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  (void)::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  ::signal(SIGCHLD, SIG_IGN);  // each connection's process is reaped by the kernel
  ::signal(SIGPIPE, SIG_IGN);
  // Nothing of the shim's but the listener: not kwb's socket (fd 3), not the generator's input or output.
  for (int fd = 0; fd < 1024; ++fd) {
    if (fd != listener && fd != 2) ::close(fd);
  }
  for (;;) {
    const int client = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      ::usleep(10000);  // out of descriptors or processes: the generator's own doing; wait for some to end
      continue;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(listener);
      relay(client, proxy_path);
      ::_exit(0);
    }
    ::close(client);
  }
}

}  // namespace

bool start_loopback_bridge(const char* proxy_socket_path) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return false;
  const int one = 1;
  (void)::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(k_model_bridge_port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listener, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener, 64) != 0) {
    const int e = errno;
    ::close(listener);
    errno = e;
    return false;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(listener);
    errno = e;
    return false;
  }
  if (pid == 0) serve(listener, proxy_socket_path);
  ::close(listener);
  return true;
}

}  // namespace kwb::shim
