#include "clients/cpp/internal/answer_fields.h"

#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>

namespace kvpeer::internal {

namespace json = boost::json;

void AnswerFields::Wrong(std::string_view key, std::string_view type) {
  if (problem_) return;
  problem_ = "the answer to " + what_ + " lacks field '" + std::string(key) + "' as " + std::string(type) + ": " +
             json::serialize(object_);
}

Error AnswerFields::error() const { return Error{ErrorCode::kBadAnswer, problem_.value_or("")}; }

const json::value* AnswerFields::Field(std::string_view key, std::string_view type) {
  const json::value* value = object_.if_contains(key);
  if (value == nullptr) Wrong(key, type);
  return value;
}

int64_t AnswerFields::Int(std::string_view key) {
  const json::value* value = Field(key, "an integer");
  if (value != nullptr && value->is_int64()) return value->get_int64();
  if (value != nullptr && value->is_uint64() && value->get_uint64() <= INT64_MAX) {
    return static_cast<int64_t>(value->get_uint64());
  }
  if (value != nullptr) Wrong(key, "an integer");
  return 0;
}

uint64_t AnswerFields::Uint(std::string_view key) {
  const json::value* value = Field(key, "an unsigned integer");
  if (value != nullptr && value->is_uint64()) return value->get_uint64();
  if (value != nullptr && value->is_int64() && value->get_int64() >= 0)
    return static_cast<uint64_t>(value->get_int64());
  if (value != nullptr) Wrong(key, "an unsigned integer");
  return 0;
}

bool AnswerFields::Bool(std::string_view key) {
  const json::value* value = Field(key, "a boolean");
  if (value != nullptr && value->is_bool()) return value->get_bool();
  if (value != nullptr) Wrong(key, "a boolean");
  return false;
}

std::string AnswerFields::String(std::string_view key) {
  const json::value* value = Field(key, "a string");
  if (value != nullptr && value->is_string()) return std::string(value->get_string());
  if (value != nullptr) Wrong(key, "a string");
  return {};
}

std::string AnswerFields::OptionalString(std::string_view key) {
  const json::value* value = object_.if_contains(key);
  if (value == nullptr || value->is_null()) return {};
  if (value->is_string()) return std::string(value->get_string());
  Wrong(key, "a string");
  return {};
}

const json::array* AnswerFields::Array(std::string_view key) {
  const json::value* value = Field(key, "an array");
  if (value != nullptr && value->is_array()) return &value->get_array();
  if (value != nullptr) Wrong(key, "an array");
  return nullptr;
}

std::vector<std::string> AnswerFields::Strings(std::string_view key) {
  std::vector<std::string> out;
  const json::array* items = Array(key);
  if (items == nullptr) return out;
  out.reserve(items->size());
  for (const json::value& item : *items) {
    if (!item.is_string()) {
      Wrong(key, "an array of strings");
      return {};
    }
    out.emplace_back(item.get_string());
  }
  return out;
}

std::vector<BlockId> AnswerFields::BlockIds(std::string_view key) {
  std::vector<BlockId> out;
  const json::array* items = Array(key);
  if (items == nullptr) return out;
  out.reserve(items->size());
  for (const json::value& item : *items) {
    const bool fits = (item.is_uint64() && item.get_uint64() <= UINT32_MAX) ||
                      (item.is_int64() && item.get_int64() >= 0 && item.get_int64() <= UINT32_MAX);
    if (!fits) {
      Wrong(key, "an array of block ids");
      return {};
    }
    out.push_back(static_cast<BlockId>(item.is_uint64() ? item.get_uint64() : static_cast<uint64_t>(item.get_int64())));
  }
  return out;
}

}  // namespace kvpeer::internal
