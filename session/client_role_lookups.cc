// ClientRole: probes (lookup) and their answers (lookup_resp).
#include <iterator>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "protocol/limits.h"
#include "session/client_role.h"
#include "session/internal/client_role_impl.h"
#include "session/internal/frame_budget.h"

namespace kvpeer::session {
namespace {

using client_detail::Probe;
using client_detail::RequestState;
using client_detail::WireSafeId;
using client_detail::WireSafeKey;
using protocol::Key;

// One key that can be asked, in its request: queued for the next flush the
// first time (then *queued is set), answered from what is known after.
ProbeAnswer AskKey(RequestState& st, const Key& key, bool* queued) {
  auto [it, added] = st.probes.try_emplace(key, Probe::kUnsent);
  if (added) {
    st.unsent.push_back(key);
    *queued = true;
    return ProbeAnswer::kRetry;
  }
  if (it->second == Probe::kHit) return ProbeAnswer::kHit;
  if (it->second == Probe::kMiss) return ProbeAnswer::kMiss;
  return ProbeAnswer::kRetry;
}

}  // namespace

// The request a probe joins: symmetric from now on, with its round open.
RequestState& ClientRole::Impl::OpenForProbes(const std::string& kv_request_id) {
  RequestState& st = Request(kv_request_id);
  st.symmetric = true;
  if (!st.open_round) st.open_round = next_round++;
  return st;
}

ProbeAnswer ClientRole::RegisterLookup(const std::string& kv_request_id, const protocol::Key& key) {
  // Nothing can answer a probe that cannot be asked: a miss, never a hang.
  if (impl_->closed || !WireSafeId(kv_request_id) || !WireSafeKey(key)) return ProbeAnswer::kMiss;
  bool queued = false;
  const ProbeAnswer answer = AskKey(impl_->OpenForProbes(kv_request_id), key, &queued);
  if (queued) impl_->flush_pending.insert(kv_request_id);
  return answer;
}

void ClientRole::RegisterLookups(const std::string& kv_request_id, const std::vector<protocol::Key>& keys,
                                 std::vector<ProbeAnswer>* answers) {
  answers->reserve(answers->size() + keys.size());
  if (impl_->closed || !WireSafeId(kv_request_id)) {
    answers->insert(answers->end(), keys.size(), ProbeAnswer::kMiss);
    return;
  }
  RequestState* st = nullptr;  // opened by the first key that can be asked, as RegisterLookup does
  bool queued = false;
  for (const Key& key : keys) {
    if (!WireSafeKey(key)) {
      answers->push_back(ProbeAnswer::kMiss);
      continue;
    }
    if (st == nullptr) st = &impl_->OpenForProbes(kv_request_id);
    answers->push_back(AskKey(*st, key, &queued));
  }
  if (queued) impl_->flush_pending.insert(kv_request_id);
}

size_t ClientRole::FlushPendingLookups() {
  size_t sent = 0;
  for (const std::string& kv : impl_->flush_pending) sent += impl_->SendLookups(kv, impl_->requests.at(kv));
  impl_->flush_pending.clear();
  return sent;
}

size_t ClientRole::ProbesWith(const std::string& kv_request_id, const std::vector<protocol::Key>& keys) const {
  auto it = impl_->requests.find(kv_request_id);
  // Without an open round the next RegisterLookup opens a fresh, empty one.
  const auto* probes = it != impl_->requests.end() && it->second.open_round ? &it->second.probes : nullptr;
  std::unordered_set<std::string_view> fresh;
  for (const Key& key : keys) {
    if (probes == nullptr || !probes->contains(key)) fresh.insert(key);
  }
  return (probes != nullptr ? probes->size() : 0) + fresh.size();
}

size_t ClientRole::Impl::SendLookups(const std::string& kv, RequestState& st) {
  for (const Key& key : st.unsent) st.probes.at(key) = Probe::kSent;
  size_t sent = 0;
  // One lookup normally; more when the keys exceed one message's list limit
  // or header budget (wire spec section 6). Every part carries the open
  // round: lookups of one round may be several (docs/wire-protocol.md, "7.1 Rounds"), each is
  // answered on its own, and answers match by (round, key), so a probe
  // split in parts still gets exactly one answer a key.
  size_t begin = 0;
  while (begin < st.unsent.size()) {
    size_t end = begin;
    size_t bytes = 0;
    while (end < st.unsent.size() && end - begin < protocol::kMaxListItems) {
      const size_t more = frame_budget::KeyBytes(st.unsent[end]);
      if (end > begin && bytes + more > frame_budget::kKeysBudget) break;
      bytes += more;
      ++end;
    }
    std::vector<Key> keys(std::make_move_iterator(st.unsent.begin() + static_cast<std::ptrdiff_t>(begin)),
                          std::make_move_iterator(st.unsent.begin() + static_cast<std::ptrdiff_t>(end)));
    Send(protocol::Lookup{kv, std::move(keys), *st.open_round});
    ++sent;
    begin = end;
  }
  st.unsent.clear();
  st.peer_lookup_open = true;
  return sent;
}

void ClientRole::OnLookupResp(const protocol::LookupResp& message) {
  auto it = impl_->requests.find(message.kv_request_id);
  if (it == impl_->requests.end()) return;
  RequestState& st = it->second;
  // An answer for a closed round is stale even if the key was probed again
  // since: the producer may have unpinned the block in between (E12).
  if (st.open_round != message.round_seq) return;
  const size_t n = std::min(message.keys.size(), message.hits.size());
  for (size_t i = 0; i < n; ++i) {
    auto probe = st.probes.find(message.keys[i]);
    // Only keys asked in this round and not answered yet: a second answer
    // must not flip a hit the engine may already have acted on (E13).
    if (probe != st.probes.end() && probe->second == Probe::kSent) {
      probe->second = message.hits[i] ? Probe::kHit : Probe::kMiss;
    }
  }
}

}  // namespace kvpeer::session
