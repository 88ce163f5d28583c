#include "daemon/api/json_answer.h"

#include <boost/json/serializer.hpp>

namespace kvpeer::daemon {
namespace {

namespace json = boost::json;

// Drains a reset serializer into *out through a small stack buffer.
void Drain(json::serializer& serializer, std::string* out) {
  char buffer[1024];
  while (!serializer.done()) {
    const json::string_view piece = serializer.read(buffer, sizeof(buffer));
    out->append(piece.data(), piece.size());
  }
}

}  // namespace

void AppendJson(std::string* out, const json::value& value) {
  json::serializer serializer;
  serializer.reset(&value);
  Drain(serializer, out);
}

void AppendJsonString(std::string* out, std::string_view text) {
  json::serializer serializer;
  serializer.reset(json::string_view(text.data(), text.size()));
  Drain(serializer, out);
}

void AppendOkAnswer(std::string* out, const json::value& id, const json::object& fields) {
  json::serializer serializer;  // one for the whole line: reset() reuses it
  out->append("{\"id\":");
  serializer.reset(&id);
  Drain(serializer, out);
  out->append(",\"ok\":true");
  for (const json::key_value_pair& field : fields) {
    if (field.key() == "id" || field.key() == "ok") continue;
    out->push_back(',');
    serializer.reset(field.key());
    Drain(serializer, out);
    out->push_back(':');
    serializer.reset(&field.value());
    Drain(serializer, out);
  }
  out->append("}\n");
}

}  // namespace kvpeer::daemon
