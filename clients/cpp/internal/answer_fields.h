// Reads the fields of an answer's object by the types control-api.md gives
// them. The first field that is missing or of another type is remembered
// (its zero value returned), and becomes a kBadAnswer Error naming it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "kvpeer/result.h"
#include "kvpeer/types.h"

namespace kvpeer::internal {

class AnswerFields {
 public:
  AnswerFields(const boost::json::object& object, std::string_view what) : object_(object), what_(what) {}

  int64_t Int(std::string_view key);
  uint64_t Uint(std::string_view key);
  bool Bool(std::string_view key);
  std::string String(std::string_view key);
  // An optional string field: empty when absent.
  std::string OptionalString(std::string_view key);
  std::vector<std::string> Strings(std::string_view key);
  std::vector<BlockId> BlockIds(std::string_view key);
  const boost::json::array* Array(std::string_view key);

  bool ok() const { return !problem_; }
  Error error() const;

 private:
  const boost::json::value* Field(std::string_view key, std::string_view type);
  void Wrong(std::string_view key, std::string_view type);

  const boost::json::object& object_;
  std::string what_;
  std::optional<std::string> problem_;
};

}  // namespace kvpeer::internal
