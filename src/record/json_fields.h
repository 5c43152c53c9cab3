// One declaration of a JSON record's fields serves both its writer and its strict reader. A record type declares
// its fields once, as a function `describe(V& v, T& t)` that calls `v("key", t.member)` for each; `encode` and
// `decode` below walk that list. Renaming a key, adding a field or changing its type is one edit, and every reader
// of the record follows it. The reader is strict: a missing field, a field of the wrong type or a field the record
// does not declare is a FormatError that names the field's path ("implementations[3].identity.key").
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace kwb::json_fields {

struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An enum's spellings, for enums a record stores: a specialization gives `static std::string_view name(E)` and
// `static std::optional<E> parse(std::string_view)`, and `static std::string choices()` for the error message.
template <typename E>
struct EnumCodec;

template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};
template <typename T>
struct is_vector : std::false_type {};
template <typename T>
struct is_vector<std::vector<T>> : std::true_type {};
template <typename T>
struct is_string_map : std::false_type {};
template <typename T>
struct is_string_map<std::map<std::string, T>> : std::true_type {};

inline std::string child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

[[noreturn]] inline void wrong_type(const std::string& path, std::string_view want, const nlohmann::json& j) {
  throw FormatError(fmt::format("field '{}' must be {}, is {}", path, want, j.is_string() ? "a string" : j.dump()));
}

template <typename T>
nlohmann::json encode(const T& v);
template <typename T>
void decode(const nlohmann::json& j, const std::string& path, T& out);

// Walks a record's declaration to write it.
class Writer {
public:
  template <typename T>
  void operator()(const char* key, const T& v) {
    m_out[key] = encode(v);
  }
  nlohmann::json take() { return std::move(m_out); }

private:
  nlohmann::json m_out = nlohmann::json::object();
};

// Walks a record's declaration to read it; finish() refuses what the declaration does not name.
class Reader {
public:
  Reader(const nlohmann::json& j, std::string path) : m_j(j), m_path(std::move(path)) {
    if (!j.is_object()) wrong_type(m_path.empty() ? "(the record)" : m_path, "an object", j);
  }
  template <typename T>
  void operator()(const char* key, T& v) {
    const std::string path = child(m_path, key);
    if (!m_j.contains(key)) throw FormatError(fmt::format("field '{}' is missing", path));
    decode(m_j[key], path, v);
    m_seen.insert(key);
  }
  // Keys the caller reads itself (a file's "schema" and "schema_version").
  void skip(const char* key) { m_seen.insert(key); }
  void finish() const {
    for (const auto& [k, unused] : m_j.items()) {
      if (!m_seen.contains(k)) {
        throw FormatError(fmt::format(
            "field '{}' is not one this kwb writes (a file of another kwb version, or edited)", child(m_path, k)));
      }
    }
  }

private:
  const nlohmann::json& m_j;
  std::string m_path;
  std::set<std::string> m_seen;
};

template <typename T>
nlohmann::json encode(const T& v) {
  if constexpr (std::is_same_v<T, nlohmann::json>) {
    return v;
  } else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, bool> || std::is_arithmetic_v<T>) {
    return nlohmann::json(v);
  } else if constexpr (std::is_enum_v<T>) {
    return nlohmann::json(std::string(EnumCodec<T>::name(v)));
  } else if constexpr (is_optional<T>::value) {
    return v ? encode(*v) : nlohmann::json(nullptr);
  } else if constexpr (is_vector<T>::value) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& x : v) a.push_back(encode(x));
    return a;
  } else if constexpr (is_string_map<T>::value) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& [k, x] : v) o[k] = encode(x);
    return o;
  } else {
    Writer w;
    describe(w, const_cast<T&>(v));  // the writer only reads
    return w.take();
  }
}

template <typename T>
void decode(const nlohmann::json& j, const std::string& path, T& out) {
  if constexpr (std::is_same_v<T, nlohmann::json>) {
    out = j;
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) wrong_type(path, "a string", j);
    out = j.get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) wrong_type(path, "true or false", j);
    out = j.get<bool>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!j.is_number()) wrong_type(path, "a number", j);
    out = j.get<T>();
  } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
    const bool ok = j.is_number_unsigned() || (j.is_number_integer() && j.get<int64_t>() >= 0);
    if (!ok || j.get<uint64_t>() > std::numeric_limits<T>::max()) wrong_type(path, "a non-negative integer", j);
    out = static_cast<T>(j.get<uint64_t>());
  } else if constexpr (std::is_integral_v<T>) {
    if (!j.is_number_integer() || (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX)) ||
        j.get<int64_t>() < std::numeric_limits<T>::min() || j.get<int64_t>() > std::numeric_limits<T>::max()) {
      wrong_type(path, "an integer", j);
    }
    out = static_cast<T>(j.get<int64_t>());
  } else if constexpr (std::is_enum_v<T>) {
    if (!j.is_string()) wrong_type(path, "a string", j);
    std::optional<T> v = EnumCodec<T>::parse(j.get<std::string>());
    if (!v) wrong_type(path, "one of " + EnumCodec<T>::choices(), j);
    out = *v;
  } else if constexpr (is_optional<T>::value) {
    if (j.is_null()) {
      out.reset();
    } else {
      typename T::value_type v{};
      decode(j, path, v);
      out = std::move(v);
    }
  } else if constexpr (is_vector<T>::value) {
    if (!j.is_array()) wrong_type(path, "an array", j);
    out.clear();
    for (size_t i = 0; i < j.size(); ++i) decode(j[i], fmt::format("{}[{}]", path, i), out.emplace_back());
  } else if constexpr (is_string_map<T>::value) {
    if (!j.is_object()) wrong_type(path, "an object", j);
    out.clear();
    for (const auto& [k, x] : j.items()) decode(x, child(path, k), out[k]);
  } else {
    Reader r(j, path);
    describe(r, out);
    r.finish();
  }
}

// A bundle file: the record's fields plus its "schema" and "schema_version".
template <typename T>
nlohmann::json encode_file(const T& v, const char* schema, int version) {
  nlohmann::json j = encode(v);
  j["schema"] = schema;
  j["schema_version"] = version;
  return j;
}

// The inverse, strict: another schema or version is refused as such, before any field is read.
template <typename T>
T decode_file(const nlohmann::json& j, const char* schema, int version) {
  if (!j.is_object()) throw FormatError("not a JSON object");
  const nlohmann::json named = j.value("schema", nlohmann::json()), v = j.value("schema_version", nlohmann::json());
  if (named != schema) throw FormatError(fmt::format("schema is {}, expected '{}'", named.dump(), schema));
  if (v != version) {
    throw FormatError(
        fmt::format("schema_version is {}, this kwb reads {}: the bundle was written by another kwb "
                    "version; verify it with the kwb that wrote it (plan.json's kwb.git_sha), or "
                    "validate again with this one",
                    v.dump(), version));
  }
  T out{};
  Reader r(j, "");
  r.skip("schema");
  r.skip("schema_version");
  describe(r, out);
  r.finish();
  return out;
}

}  // namespace kwb::json_fields
