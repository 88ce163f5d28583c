// What Answer keeps of its line: the parsed object.
#pragma once

#include <boost/json/object.hpp>

namespace kvpeer::internal {

struct ParsedAnswer {
  boost::json::object object;
};

}  // namespace kvpeer::internal
