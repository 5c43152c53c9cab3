#include "cli/safe_output.h"

#include "util/text.h"

#include <iostream>
#include <streambuf>
#include <string>

namespace kwb::cli {

namespace {

class EscapingBuffer final : public std::streambuf {
public:
  explicit EscapingBuffer(std::streambuf* target) : m_target(target) {}

protected:
  int_type overflow(int_type ch) override {
    if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
    const char c = traits_type::to_char_type(ch);
    return xsputn(&c, 1) == 1 ? ch : traits_type::eof();
  }

  std::streamsize xsputn(const char* s, std::streamsize n) override {
    m_scratch.clear();
    for (std::streamsize i = 0; i < n; ++i) m_escaper.put(s[i], m_scratch);
    const auto len = static_cast<std::streamsize>(m_scratch.size());
    return m_target->sputn(m_scratch.data(), len) == len ? n : 0;
  }

  int sync() override { return m_target->pubsync(); }

private:
  std::streambuf* m_target;
  TerminalEscaper m_escaper;
  std::string m_scratch;
};

}  // namespace

void install_safe_terminal_output() {
  // Never destroyed: the streams are flushed once more after every static destructor has run. The buffers hold no
  // data of their own (each write goes straight through), so nothing is lost at exit.
  std::cout.rdbuf(new EscapingBuffer(std::cout.rdbuf()));
  std::cerr.rdbuf(new EscapingBuffer(std::cerr.rdbuf()));
}

}  // namespace kwb::cli
