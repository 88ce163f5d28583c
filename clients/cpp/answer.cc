#include "kvpeer/answer.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "clients/cpp/internal/answer_fields.h"
#include "clients/cpp/internal/parsed_answer.h"

namespace kvpeer {

namespace json = boost::json;
using internal::AnswerFields;

Result<Answer> Answer::Parse(std::string line) {
  boost::system::error_code ec;
  json::value value = json::parse(line, ec);
  if (ec || !value.is_object()) {
    return Error{ErrorCode::kBadAnswer, "kvpeerd answered with a line that is not a JSON object: " + line};
  }
  auto parsed = std::make_shared<internal::ParsedAnswer>();
  parsed->object = std::move(value.get_object());
  return Answer(std::move(line), std::move(parsed));
}

Result<void> Answer::Status() const {
  const json::object& object = parsed_->object;
  const json::value* ok = object.if_contains("ok");
  if (ok != nullptr && ok->is_bool() && ok->get_bool()) return {};
  const json::value* error = object.if_contains("error");
  if (ok == nullptr || !ok->is_bool() || error == nullptr || !error->is_object()) {
    return Error{ErrorCode::kBadAnswer, "kvpeerd's answer has neither ok:true nor an error object: " + text_};
  }
  AnswerFields fields(error->get_object(), "a failed request");
  const std::string code = fields.String("code");
  std::string message = fields.String("message");
  if (!fields.ok()) return fields.error();
  return Error{ErrorCodeFromName(code), std::move(message)};
}

namespace answer {
namespace {

// The answer's fields once its status is ok; `decode` reads them.
template <class T, class Decode>
Result<T> Decoded(const Answer& answer, std::string_view what, Decode decode) {
  if (Result<void> status = answer.Status(); !status.ok()) return status.error();
  AnswerFields fields(answer.parsed().object, std::string(what));
  T value = decode(fields);
  if (!fields.ok()) return fields.error();
  return value;
}

Result<Probe> ProbeOf(const json::value& item) {
  if (item.is_string()) {
    const json::string& text = item.get_string();
    if (text == "hit") return Probe::kHit;
    if (text == "miss") return Probe::kMiss;
    if (text == "retry") return Probe::kRetry;
  }
  return Error{ErrorCode::kBadAnswer,
               "a lookup result is not \"hit\", \"miss\" or \"retry\": " + json::serialize(item)};
}

Result<JobResult> JobResultOf(const json::value& item) {
  if (!item.is_object()) return Error{ErrorCode::kBadAnswer, "a poll result is not an object"};
  AnswerFields fields(item.get_object(), "poll (a job result)");
  JobResult job;
  job.job_id = fields.Int("job_id");
  job.kv_request_id = fields.String("kv_request_id");
  job.success = fields.Bool("success");
  job.reason = fields.OptionalString("reason");
  if (!fields.ok()) return fields.error();
  return job;
}

}  // namespace

Result<HelloInfo> Hello(const Answer& answer) {
  return Decoded<HelloInfo>(answer, "hello", [](AnswerFields& f) {
    return HelloInfo{f.String("node_id"), f.String("version"), f.String("wire_version")};
  });
}

Result<RegionInfo> RegisterRegion(const Answer& answer) {
  return Decoded<RegionInfo>(answer, "register_region", [](AnswerFields& f) {
    return RegionInfo{f.Int("region_id"), f.Uint("bytes")};
  });
}

Result<uint64_t> Publish(const Answer& answer) {
  return Decoded<uint64_t>(answer, "publish", [](AnswerFields& f) { return f.Uint("published"); });
}

Result<UnpublishResult> Unpublish(const Answer& answer) {
  return Decoded<UnpublishResult>(answer, "unpublish", [](AnswerFields& f) {
    UnpublishResult result;
    result.released = f.BlockIds("released");
    result.pinned = f.BlockIds("pinned");
    return result;
  });
}

Result<std::vector<Probe>> Lookup(const Answer& answer) {
  if (Result<void> status = answer.Status(); !status.ok()) return status.error();
  AnswerFields fields(answer.parsed().object, "lookup");
  const json::array* results = fields.Array("results");
  if (!fields.ok()) return fields.error();
  std::vector<Probe> probes;
  probes.reserve(results->size());
  for (const json::value& item : *results) {
    Result<Probe> probe = ProbeOf(item);
    if (!probe.ok()) return probe.error();
    probes.push_back(probe.value());
  }
  return probes;
}

Result<uint64_t> Flush(const Answer& answer) {
  return Decoded<uint64_t>(answer, "flush", [](AnswerFields& f) { return f.Uint("sent"); });
}

Result<PollReport> Poll(const Answer& answer) {
  if (Result<void> status = answer.Status(); !status.ok()) return status.error();
  AnswerFields fields(answer.parsed().object, "poll");
  PollReport report;
  const json::array* results = fields.Array("results");
  report.failed_requests = fields.Strings("failed_requests");
  report.released = fields.BlockIds("released");
  if (!fields.ok()) return fields.error();
  report.results.reserve(results->size());
  for (const json::value& item : *results) {
    Result<JobResult> job = JobResultOf(item);
    if (!job.ok()) return job.error();
    report.results.push_back(std::move(job).value());
  }
  return report;
}

Result<void> Done(const Answer& answer) { return answer.Status(); }

}  // namespace answer
}  // namespace kvpeer
