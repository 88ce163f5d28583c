#include "daemon/control/op_answers_json.h"

#include <boost/json/array.hpp>

namespace kvpeer::daemon {
namespace {

namespace json = boost::json;

const char* AnswerName(session::ProbeAnswer answer) {
  switch (answer) {
    case session::ProbeAnswer::kHit:
      return "hit";
    case session::ProbeAnswer::kMiss:
      return "miss";
    case session::ProbeAnswer::kRetry:
      return "retry";
  }
  return "retry";
}

}  // namespace

void AddProbeAnswers(const std::vector<session::ProbeAnswer>& answers, json::object* response) {
  json::array results(response->storage());
  results.reserve(answers.size());
  for (session::ProbeAnswer answer : answers) results.emplace_back(AnswerName(answer));
  (*response)["results"] = std::move(results);
}

void AddUnpublishResult(const UnpublishResult& result, json::object* response) {
  const json::storage_ptr& memory = response->storage();
  (*response)["released"] = json::array(result.released.begin(), result.released.end(), memory);
  (*response)["pinned"] = json::array(result.pinned.begin(), result.pinned.end(), memory);
}

void AddPollReport(const PollReport& report, json::object* response) {
  const json::storage_ptr& memory = response->storage();
  json::array results(memory);
  results.reserve(report.results.size());
  for (const PollReport::Done& done : report.results) {
    const session::JobResult& result = done.result;
    json::object entry(memory);
    entry["job_id"] = done.job_id;
    entry["kv_request_id"] = result.kv_request_id;
    entry["success"] = result.success;
    if (!result.success || !result.reason.empty()) entry["reason"] = result.reason;
    results.push_back(std::move(entry));
  }
  (*response)["results"] = std::move(results);
  (*response)["failed_requests"] = json::array(report.failed_requests.begin(), report.failed_requests.end(), memory);
  (*response)["released"] = json::array(report.released.begin(), report.released.end(), memory);
}

json::array EnginesStatusJson(const std::vector<EngineRegistry::EngineStatus>& engines) {
  json::array out;
  out.reserve(engines.size());
  for (const EngineRegistry::EngineStatus& status : engines) {
    json::object engine;
    engine["client"] = status.client;
    engine["pid"] = status.pid;
    engine["num_blocks"] = status.num_blocks;
    engine["published"] = status.published;
    engine["loads_in_flight"] = status.loads_in_flight;
    out.push_back(std::move(engine));
  }
  return out;
}

}  // namespace kvpeer::daemon
