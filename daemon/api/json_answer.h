// Writing control API answer lines straight into the connection's output
// buffer (docs/control-api.md section 1): `{"id":…,"ok":true,<fields>}` and
// a newline, without building a json::object per answer.
//
// Values and strings go through Boost.JSON's serializer, so ids are echoed
// exactly as json::serialize prints them and strings are escaped by the
// same code as everywhere else.
//
// Thread-safety: the functions are pure.
#pragma once

#include <string>
#include <string_view>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

namespace kvpeer::daemon {

// Appends `value` as JSON text.
void AppendJson(std::string* out, const boost::json::value& value);
// Appends `text` as a JSON string (quoted, escaped).
void AppendJsonString(std::string* out, std::string_view text);

// Appends the success answer line for request `id` with the op's `fields`
// after "id" and "ok" (fields named "id" or "ok" are left out: they never
// replace the answer's own), then a newline.
void AppendOkAnswer(std::string* out, const boost::json::value& id, const boost::json::object& fields);

}  // namespace kvpeer::daemon
