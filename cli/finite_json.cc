#include "cli/finite_json.h"

#include <cmath>

namespace kvpeer::cli {

void NullNonFinite(boost::json::value& value) {
  if (value.is_double() && !std::isfinite(value.get_double())) {
    value = nullptr;
  } else if (value.is_array()) {
    for (boost::json::value& item : value.get_array()) NullNonFinite(item);
  } else if (value.is_object()) {
    NullNonFinite(value.get_object());
  }
}

void NullNonFinite(boost::json::object& object) {
  for (auto& entry : object) NullNonFinite(entry.value());
}

}  // namespace kvpeer::cli
