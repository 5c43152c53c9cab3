// The loopback bridge inside a generator's sandbox (docs/arms.md, "Calling a model"): a TCP listener on
// 127.0.0.1:k_model_bridge_port that carries each connection, byte for byte, to kwb's model proxy on its Unix socket.
// Agent programs that take only a base URL (`http://127.0.0.1:PORT/anthropic`) reach the proxy through it; the
// proxy, outside the sandbox, still decides and records every request.
#pragma once

namespace kwb::shim {

// Binds the listener and forks the bridge process, which serves until the sandbox ends. Called by the shim before
// its seccomp filter is loaded: the bridge is kwb's code, not supervised, and its calls never reach the supervisor
// (whose first supervised call must be the shim's execve of the generator). The bridge makes itself non-dumpable, so
// the generator (the same user, without capabilities) can neither trace it nor read its memory; it holds no
// descriptor but the listener, its accepted connections and the proxy's socket. Returns false with errno set when
// the listener cannot be made.
bool start_loopback_bridge(const char* proxy_socket_path);

}  // namespace kwb::shim
