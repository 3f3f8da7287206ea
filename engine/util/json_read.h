// Reading JSON (checkpoint pointers, summaries, traces and metrics read back by resume and the
// tests) with nlohmann-json. defines: Json, parse_json, json_value_text. No LibTorch.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace odyssey {

/// A parsed JSON document; objects keep their keys in the order they were written.
using Json = nlohmann::ordered_json;

/// Parses one JSON document; on failure returns nullopt and sets *error to "offset N: what".
std::optional<Json> parse_json(std::string_view text, std::string* error = nullptr);

/// A value as it would be written, for messages: scalars in full, containers as [...] and {...}.
std::string json_value_text(const Json& value);

}  // namespace odyssey
