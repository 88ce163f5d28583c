#include "daemon/metrics/counters.h"

#include <stdexcept>

#include "daemon/api/api_error.h"
#include "daemon/api/control_ops.h"
#include "daemon/metrics/reason_labels.h"

namespace kvpeer::daemon {
namespace {

std::vector<std::string_view> MakeLabels(CounterFamily family) {
  std::vector<std::string_view> labels;
  switch (family) {
    case CounterFamily::kControlRequests:
      for (const ControlOp& op : ControlOps()) labels.push_back(op.name);
      labels.push_back("unknown");
      break;
    case CounterFamily::kControlErrors:
      // control_server.cc counts by ApiErrorIndex, an index into this list.
      labels.assign(kApiErrorCodes.begin(), kApiErrorCodes.end());
      break;
    case CounterFamily::kStoreFailures:
      labels.assign(kStoreFailureLabels.begin(), kStoreFailureLabels.end());
      break;
  }
  return labels;
}

}  // namespace

Counter LimitCounter(std::string_view flag) {
  for (const CounterSpec& spec : kCounterSpecs) {
    if (!spec.limit.empty() && spec.limit == flag) return spec.id;
  }
  throw std::logic_error("no limit counter for " + std::string(flag));
}

const std::vector<std::string_view>& CounterLabels(CounterFamily family) {
  static const std::array<std::vector<std::string_view>, kCounterFamilies.size()> kLabels = {
      MakeLabels(CounterFamily::kControlRequests), MakeLabels(CounterFamily::kControlErrors),
      MakeLabels(CounterFamily::kStoreFailures)};
  return kLabels[static_cast<size_t>(family)];
}

size_t ControlRequestLabel(std::string_view op_name) {
  const ControlOp* op = FindControlOp(op_name);
  return op != nullptr ? static_cast<size_t>(op - ControlOps().data()) : ControlOps().size();
}

Counters::Counters() {
  for (const CounterFamilySpec& family : kCounterFamilies) {
    labelled_[static_cast<size_t>(family.id)].assign(CounterLabels(family.id).size(), 0);
  }
}

std::map<std::string, uint64_t> Counters::ByName() const {
  std::map<std::string, uint64_t> named;
  for (const CounterSpec& spec : kCounterSpecs) named.emplace(spec.name, Get(spec.id));
  for (const CounterFamilySpec& family : kCounterFamilies) {
    const std::vector<std::string_view>& labels = CounterLabels(family.id);
    for (size_t i = 0; i < labels.size(); ++i) {
      named.emplace(std::string(family.status_prefix) + std::string(labels[i]), Get(family.id, i));
    }
  }
  return named;
}

}  // namespace kvpeer::daemon
