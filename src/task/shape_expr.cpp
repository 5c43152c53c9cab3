#include "task/shape_expr.h"

#include <fmt/format.h>

#include <cctype>
#include <stdexcept>

namespace kwb {

struct ShapeExpr::Node {
  enum class Kind { number, name, add, sub, mul } kind;
  int64_t value = 0;
  std::string name;
  std::shared_ptr<const Node> lhs, rhs;
};

namespace {

using NodePtr = std::shared_ptr<const ShapeExpr::Node>;

// Recursive descent over: expr := term (('+'|'-') term)*; term := atom ('*' atom)*; atom := int | name | '(' expr ')'
class Parser {
public:
  explicit Parser(const std::string& text) : m_text(text) {}

  NodePtr parse() {
    NodePtr e = expr();
    skip_space();
    if (m_pos != m_text.size()) {
      fail(fmt::format("unexpected '{}'", m_text[m_pos]));
    }
    return e;
  }

private:
  NodePtr expr() {
    NodePtr lhs = term();
    for (;;) {
      skip_space();
      if (peek('+') || peek('-')) {
        auto kind = m_text[m_pos++] == '+' ? ShapeExpr::Node::Kind::add : ShapeExpr::Node::Kind::sub;
        lhs = std::make_shared<ShapeExpr::Node>(ShapeExpr::Node{kind, 0, {}, lhs, term()});
      } else {
        return lhs;
      }
    }
  }

  NodePtr term() {
    NodePtr lhs = atom();
    for (;;) {
      skip_space();
      if (!peek('*')) return lhs;
      ++m_pos;
      lhs = std::make_shared<ShapeExpr::Node>(ShapeExpr::Node{ShapeExpr::Node::Kind::mul, 0, {}, lhs, atom()});
    }
  }

  NodePtr atom() {
    skip_space();
    if (m_pos >= m_text.size()) fail("expected a dim name, an integer or '('");
    char c = m_text[m_pos];
    if (c == '(') {
      ++m_pos;
      NodePtr e = expr();
      skip_space();
      if (!peek(')')) fail("expected ')'");
      ++m_pos;
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t v = 0;
      while (m_pos < m_text.size() && std::isdigit(static_cast<unsigned char>(m_text[m_pos]))) {
        v = v * 10 + (m_text[m_pos++] - '0');
        if (v > (int64_t{1} << 40)) fail("integer too large");
      }
      return std::make_shared<ShapeExpr::Node>(ShapeExpr::Node{ShapeExpr::Node::Kind::number, v, {}, {}, {}});
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = m_pos;
      while (m_pos < m_text.size() &&
             (std::isalnum(static_cast<unsigned char>(m_text[m_pos])) || m_text[m_pos] == '_')) {
        ++m_pos;
      }
      return std::make_shared<ShapeExpr::Node>(
          ShapeExpr::Node{ShapeExpr::Node::Kind::name, 0, m_text.substr(start, m_pos - start), {}, {}});
    }
    fail(fmt::format("unexpected '{}' (expected a dim name, an integer or '(')", c));
  }

  bool peek(char c) const { return m_pos < m_text.size() && m_text[m_pos] == c; }
  void skip_space() {
    while (m_pos < m_text.size() && m_text[m_pos] == ' ') ++m_pos;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument(fmt::format("bad shape expression '{}' at character {}: {}", m_text, m_pos + 1, what));
  }

  const std::string& m_text;
  size_t m_pos = 0;
};

int64_t eval(const ShapeExpr::Node& n, const std::map<std::string, int64_t>& dims) {
  using K = ShapeExpr::Node::Kind;
  switch (n.kind) {
    case K::number:
      return n.value;
    case K::name: {
      auto it = dims.find(n.name);
      if (it == dims.end()) throw std::out_of_range(fmt::format("dim '{}' is not given", n.name));
      return it->second;
    }
    case K::add:
    case K::sub:
    case K::mul: {
      // Dims come from task.toml: a product that leaves int64_t must be an error, never a wrapped size.
      const int64_t a = eval(*n.lhs, dims);
      const int64_t b = eval(*n.rhs, dims);
      int64_t r = 0;
      const bool overflow = n.kind == K::add   ? __builtin_add_overflow(a, b, &r)
                            : n.kind == K::sub ? __builtin_sub_overflow(a, b, &r)
                                               : __builtin_mul_overflow(a, b, &r);
      if (overflow) throw std::overflow_error("");
      return r;
    }
  }
  throw std::logic_error("unreachable shape node");
}

void names(const ShapeExpr::Node& n, std::set<std::string>& out) {
  if (n.kind == ShapeExpr::Node::Kind::name) out.insert(n.name);
  if (n.lhs) names(*n.lhs, out);
  if (n.rhs) names(*n.rhs, out);
}

}  // namespace

ShapeExpr ShapeExpr::parse(const std::string& text) {
  ShapeExpr e;
  e.m_text = text;
  e.m_root = Parser(text).parse();
  return e;
}

ShapeExpr ShapeExpr::constant(int64_t value) {
  ShapeExpr e;
  e.m_text = std::to_string(value);
  e.m_root = std::make_shared<Node>(Node{Node::Kind::number, value, {}, {}, {}});
  return e;
}

int64_t ShapeExpr::evaluate(const std::map<std::string, int64_t>& dims) const {
  try {
    return eval(*m_root, dims);
  } catch (const std::overflow_error&) {
    throw std::overflow_error(fmt::format("'{}' overflows 64 bits with these dims", m_text));
  }
}

void ShapeExpr::collect_names(std::set<std::string>& out) const { names(*m_root, out); }

}  // namespace kwb
