// JSON output for Odyssey (--json, metrics.jsonl, Perfetto traces, summaries): a streaming writer
// whose escaping and number text come from nlohmann-json. defines: JsonWriter, json_quote. No LibTorch.
// Reading JSON back: engine/util/json_read.h (nlohmann::ordered_json, kept out of this header).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace odyssey {

/// Streams compact JSON into a string. Keys and values are written in call order; the writer
/// inserts commas. Usage: JsonWriter w(out); w.begin_object().key("fits").value(true).end_object();
/// Streaming (no document tree) because traces and metrics are appended event by event.
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
  JsonWriter& value(double number);  ///< NaN and infinities as null (JSON has neither)
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

/// A string as a JSON string literal (quotes included; invalid UTF-8 replaced by U+FFFD).
std::string json_quote(std::string_view text);

}  // namespace odyssey
