// The streaming JSON writer (its escaping and numbers from nlohmann-json) and parse_json over
// nlohmann-json's parser, with the byte offset of a syntax error in its message.
#include "engine/util/json.h"

#include <cmath>

#include "engine/util/json_read.h"

namespace odyssey {

std::string json_quote(std::string_view text) {
  return Json(std::string(text)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

void JsonWriter::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_.push_back(',');
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  separate();
  out_.push_back('{');
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::end_object() {
  out_.push_back('}');
  first_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::begin_array() {
  separate();
  out_.push_back('[');
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::end_array() {
  out_.push_back(']');
  first_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::key(std::string_view name) {
  separate();
  out_ += json_quote(name);
  out_.push_back(':');
  after_key_ = true;
  return *this;
}
JsonWriter& JsonWriter::value(std::string_view text) { return raw(json_quote(text)); }
JsonWriter& JsonWriter::value(int64_t number) { return raw(Json(number).dump()); }
JsonWriter& JsonWriter::value(uint64_t number) { return raw(Json(number).dump()); }
JsonWriter& JsonWriter::value(double number) { return raw(Json(number).dump()); }  // NaN/Inf: null
JsonWriter& JsonWriter::value(bool flag) { return raw(flag ? "true" : "false"); }
JsonWriter& JsonWriter::null() { return raw("null"); }
JsonWriter& JsonWriter::raw(std::string_view json) {
  separate();
  out_ += json;
  return *this;
}

std::optional<Json> parse_json(std::string_view text, std::string* error) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    if (error) *error = "offset " + std::to_string(e.byte) + ": " + e.what();
    return std::nullopt;
  } catch (const Json::exception& e) {  // out_of_range.406: a number such as 1e400 overflows a double
    if (error) *error = e.what();
    return std::nullopt;
  }
}

std::string json_value_text(const Json& value) {
  if (value.is_array()) return "[...]";
  if (value.is_object()) return "{...}";
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace odyssey
