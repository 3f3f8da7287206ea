// Minimal JSON for Odyssey's outputs (--json, metrics.jsonl, Perfetto traces, summaries) and for
// reading them back in tests and on resume. defines: JsonWriter, JsonValue, parse_json. No LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace odyssey {

/// Streams compact JSON into a string. Keys and values are written in call order; the writer
/// inserts commas. Usage: JsonWriter w(out); w.begin_object().key("fits").value(true).end_object();
class JsonWriter {
 public:
  explicit JsonWriter(std::string& out) : out_(out) {}
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);
  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
  JsonWriter& value(int64_t number);
  JsonWriter& value(int number) { return value(static_cast<int64_t>(number)); }
  JsonWriter& value(uint64_t number);
  JsonWriter& value(double number);
  JsonWriter& value(bool flag);
  JsonWriter& null();
  /// Appends already-serialised JSON as one value.
  JsonWriter& raw(std::string_view json);

 private:
  void separate();
  std::string& out_;
  std::vector<bool> first_;  // one entry per open container: no element written yet
  bool after_key_ = false;
};

/// Escapes a string for JSON (quotes included).
std::string json_quote(std::string_view text);

/// A parsed JSON value. Numbers keep their integer value when they were written as integers.
struct JsonValue {
  enum class Type { Null, Bool, Number, String, Array, Object } type = Type::Null;
  bool boolean = false;
  double number = 0;
  bool is_integer = false;
  int64_t integer = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::map<std::string, JsonValue> object;

  bool has(const std::string& name) const { return type == Type::Object && object.count(name); }
  const JsonValue& at(const std::string& name) const;  // throws std::out_of_range
  int64_t as_int() const { return is_integer ? integer : static_cast<int64_t>(number); }
};

/// Parses one JSON document; on failure returns nullopt and sets *error to "offset N: what".
std::optional<JsonValue> parse_json(std::string_view text, std::string* error = nullptr);

}  // namespace odyssey
