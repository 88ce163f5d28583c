// The behaviour every row of the option table shares: parsing, reporting
// and the live copy follow from the row's kind and field, so that a row
// states its bounds and default once (config/option_table.cc).
#include <bit>
#include <boost/json/array.hpp>
#include <type_traits>

#include "config/option_values.h"
#include "config/settings.h"

namespace kvpeer::config {
namespace {

namespace json = boost::json;

// A bound as documented: 2^N for the large powers of two, else decimal.
std::string BoundText(int64_t bound) {
  const auto value = static_cast<uint64_t>(bound);
  if (value >= (uint64_t{1} << 40) && std::has_single_bit(value)) return "2^" + std::to_string(std::countr_zero(value));
  return std::to_string(bound);
}

Status ApplyCount(const OptionSpec& row, const std::string& raw, Settings* s) {
  StatusOr<uint64_t> value = ParseCount(raw, row.min, row.max);
  if (!value.ok()) return value.status();
  if (const auto* field = std::get_if<CountField>(&row.field)) {
    s->** field = *value;
  } else {
    s->*std::get<OptionalCountField>(row.field) = *value;
  }
  return Status::Ok();
}

Status ApplySeconds(const OptionSpec& row, const std::string& raw, Settings* s) {
  StatusOr<std::chrono::seconds> value = ParseSeconds(raw, row.min, row.max);
  if (!value.ok()) return value.status();
  s->*std::get<SecondsField>(row.field) = *value;
  return Status::Ok();
}

Status ApplyIds(const OptionSpec& row, const std::vector<std::string>& raw, Settings* s) {
  StatusOr<std::vector<uint32_t>> ids = ParseIds(raw, row.kind == Kind::kGroupIds);
  if (!ids.ok()) return ids.status();
  s->*std::get<IdsField>(row.field) = std::move(ids).value();
  return Status::Ok();
}

Status ApplyPemFile(const OptionSpec& row, const std::string& raw, Settings* s) {
  if (raw.empty()) return Status::Invalid("'' is empty; allowed: the path of a PEM file");
  s->*std::get<TextField>(row.field) = raw;  // read and checked once all options are known
  return Status::Ok();
}

// The effective value of a field: a number, a list, a string or null.
struct FieldJson {
  const Settings& s;
  json::value operator()(std::monostate) const { return nullptr; }
  json::value operator()(CountField field) const { return s.*field; }
  json::value operator()(OptionalCountField field) const {
    return (s.*field) ? json::value(*(s.*field)) : json::value(nullptr);
  }
  json::value operator()(SecondsField field) const { return (s.*field).count(); }
  json::value operator()(IdsField field) const { return json::array((s.*field).begin(), (s.*field).end()); }
  json::value operator()(TextField field) const {
    return (s.*field).empty() ? json::value(nullptr) : json::value(s.*field);
  }
  json::value operator()(CidrsField field) const {
    json::array blocks;
    for (const Cidr& block : s.*field) blocks.emplace_back(block.ToString());
    return blocks;
  }
};

}  // namespace

Status OptionSpec::apply(const std::vector<std::string>& raw, Settings* settings) const {
  switch (kind) {
    case Kind::kCount:
      return ApplyCount(*this, raw.front(), settings);
    case Kind::kSeconds:
      return ApplySeconds(*this, raw.front(), settings);
    case Kind::kUserIds:
    case Kind::kGroupIds:
      return ApplyIds(*this, raw, settings);
    case Kind::kPemFile:
      return ApplyPemFile(*this, raw.front(), settings);
    case Kind::kOther:
      break;
  }
  return parse(*this, raw, settings);
}

json::value OptionSpec::effective(const Settings& settings) const {
  if (show != nullptr) return show(settings);
  return std::visit(FieldJson{settings}, field);
}

void OptionSpec::CopyLive(const Settings& from, Settings* to) const {
  if (copy != nullptr) return copy(from, to);
  std::visit(
      [&](auto member) {
        if constexpr (!std::is_same_v<decltype(member), std::monostate>) to->*member = from.*member;
      },
      field);
}

std::string OptionSpec::RangeText() const { return BoundText(min) + ".." + BoundText(max); }

std::string OptionSpec::HelpText() const {
  std::string text(help);
  if (const size_t at = text.find("{range}"); at != std::string::npos) text.replace(at, 7, RangeText());
  if (!default_text.empty()) text += " [default: " + std::string(default_text) + "]";
  return text;
}

}  // namespace kvpeer::config
