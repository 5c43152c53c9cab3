// Symbolic shape expressions: "rows", "cols", "2*cols+1", "(rows+1)*4". Integers, identifiers, + - * and
// parentheses; evaluated against a case's dims. Parsed once when the manifest is loaded, so a typo is reported at
// load time with its line, not when a case runs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

namespace kwb {

class ShapeExpr {
public:
  // Throws std::invalid_argument with a message saying what was expected at which character.
  static ShapeExpr parse(const std::string& text);
  static ShapeExpr constant(int64_t value);

  // Throws std::out_of_range naming the missing dim, std::overflow_error naming the expression when a step of it
  // leaves int64_t.
  int64_t evaluate(const std::map<std::string, int64_t>& dims) const;
  void collect_names(std::set<std::string>& names) const;
  const std::string& text() const { return m_text; }

  struct Node;

private:
  std::string m_text;
  std::shared_ptr<const Node> m_root;  // immutable, so sharing between copies is safe
};

}  // namespace kwb
