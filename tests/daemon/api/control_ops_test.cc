// The op table (daemon/api/control_ops.h) against docs/control-api.md: every op
// of the "Engine session" and "Operator operations" tables exactly once,
// engine ops needing a hello, and the "Shutdown" section's new work refused
// while the daemon drains. Dispatch through a real socket is covered by
// control_framing_test.cc and the integration tests.
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json/parse.hpp>

#include "daemon/api/control_ops.h"

#if !defined(KVPEER_CONTROL_API_DOC) || !defined(KVPEER_CONTROL_FUZZ_DICT)
#error "KVPEER_CONTROL_API_DOC and KVPEER_CONTROL_FUZZ_DICT must name docs/control-api.md and the fuzz dictionary"
#endif

namespace kvpeer::daemon {
namespace {

using Names = std::multiset<std::string>;

std::string ReadFile(const char* path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string ReadDoc() { return ReadFile(KVPEER_CONTROL_API_DOC); }

// The text of the "## N. <heading>" section, up to the next "## ".
std::string Section(const std::string& doc, const std::string& heading) {
  const std::regex title("\n## [0-9]+\\. " + heading + "[^\n]*\n");
  std::smatch found;
  REQUIRE(std::regex_search(doc, found, title));
  const size_t begin = static_cast<size_t>(found.position(0) + found.length(0));
  const size_t end = doc.find("\n## ", begin);
  return doc.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// The first column of the section's "| op | ..." table: "| `name` | ...".
Names TableOps(const std::string& section) {
  Names ops;
  std::istringstream lines(section);
  const std::regex row("^\\| `([a-z_]+)` \\|.*");
  bool in_table = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| op |", 0) == 0)
      in_table = true;
    else if (line.rfind("|", 0) != 0)
      in_table = false;
    std::smatch match;
    if (in_table && std::regex_match(line, match, row)) ops.insert(match[1]);
  }
  return ops;
}

// The ops named in "the ops that start new work answer `shutting_down`: ...".
Names NewWorkOpsOfDoc(const std::string& shutdown) {
  const size_t begin = shutdown.find("`shutting_down`:");
  REQUIRE(begin != std::string::npos);
  const size_t end = shutdown.find(". ", begin);
  const std::string sentence = shutdown.substr(begin + 16, end - begin - 16);
  Names ops;
  const std::regex quoted("`([a-z_]+)`");
  for (std::sregex_iterator it(sentence.begin(), sentence.end(), quoted), last; it != last; ++it) {
    ops.insert((*it)[1]);
  }
  return ops;
}

template <typename Keep>
Names TableOpsWhere(Keep keep) {
  Names ops;
  for (const ControlOp& op : ControlOps()) {
    if (keep(op)) ops.insert(std::string(op.name));
  }
  return ops;
}

Names AllTableOps() {
  return TableOpsWhere([](const ControlOp&) { return true; });
}

TEST_CASE("the op table has every op of the control API exactly once") {
  const std::string doc = ReadDoc();
  Names documented = TableOps(Section(doc, "Engine session"));
  const Names operator_ops = TableOps(Section(doc, "Operator operations"));
  REQUIRE(documented.size() == 10);
  REQUIRE(operator_ops.size() == 4);
  documented.insert(operator_ops.begin(), operator_ops.end());
  CHECK(AllTableOps() == documented);
  CHECK(std::set<std::string>(documented.begin(), documented.end()).size() == documented.size());
}

TEST_CASE("engine ops need a hello, except hello itself") {
  const std::string doc = ReadDoc();
  Names engine_ops = TableOps(Section(doc, "Engine session"));
  engine_ops.erase("hello");
  CHECK(TableOpsWhere([](const ControlOp& op) { return op.needs_engine; }) == engine_ops);
}

TEST_CASE("shutdown refuses exactly the ops that start new work") {
  const Names new_work = {"hello", "register_region", "publish", "lookup", "load", "store", "connect"};
  CHECK(TableOpsWhere([](const ControlOp& op) { return op.is_new_work; }) == new_work);
  CHECK(NewWorkOpsOfDoc(Section(ReadDoc(), "Shutdown")) == new_work);
}

TEST_CASE("publishing and operating are the privileged ops (docs/security.md, \"Who may publish and operate\")") {
  const Names publisher = {"publish", "store"};
  const Names operator_ops = {"connect", "disconnect"};
  CHECK(TableOpsWhere([](const ControlOp& op) { return op.privilege == Privilege::kPublisher; }) == publisher);
  CHECK(TableOpsWhere([](const ControlOp& op) { return op.privilege == Privilege::kOperator; }) == operator_ops);
}

// The fuzz target takes its ops from the table, but libFuzzer's dictionary
// is a plain file: each op should be a token so that mutations reach it.
TEST_CASE("the control fuzz dictionary has every op as a token") {
  const std::string dict = ReadFile(KVPEER_CONTROL_FUZZ_DICT);
  for (const ControlOp& op : ControlOps()) {
    CHECK_THAT(dict, Catch::Contains("\n\"\\\"" + std::string(op.name) + "\\\"\"\n"));
  }
}

TEST_CASE("FindControlOp finds every row and nothing else") {
  for (const ControlOp& op : ControlOps()) {
    REQUIRE(FindControlOp(op.name) == &op);
  }
  CHECK(FindControlOp("frobnicate") == nullptr);
  CHECK(FindControlOp("Publish") == nullptr);  // names are case-sensitive
  CHECK(FindControlOp("") == nullptr);
}

TEST_CASE("every op has a handler of its own") {
  const std::span<const ControlOp> ops = ControlOps();
  for (size_t i = 0; i < ops.size(); ++i) {
    // Each handler the op's WaitRule uses exists, and only those.
    CHECK((ops[i].handler != nullptr) == (ops[i].waits != WaitRule::kAlways));
    CHECK((ops[i].wait_handler != nullptr) == (ops[i].waits != WaitRule::kNever));
    for (size_t j = 0; j < i; ++j) {
      if (ops[i].handler != nullptr) CHECK(ops[i].handler != ops[j].handler);
      if (ops[i].wait_handler != nullptr) CHECK(ops[i].wait_handler != ops[j].wait_handler);
    }
  }
}

TEST_CASE("only connect, and lookup and poll with a positive wait_ms, wait") {
  auto waits = [](std::string_view op, const char* request) {
    return MayWait(*FindControlOp(op), boost::json::parse(request).as_object());
  };
  CHECK(waits("connect", R"({"op":"connect"})"));
  CHECK(waits("poll", R"({"op":"poll","wait_ms":5})"));
  CHECK(waits("lookup", R"({"op":"lookup","wait_ms":1})"));
  CHECK_FALSE(waits("poll", R"({"op":"poll"})"));
  CHECK_FALSE(waits("poll", R"({"op":"poll","wait_ms":0})"));
  // Refused by the handler that answers at once, with the field's rule.
  CHECK_FALSE(waits("poll", R"({"op":"poll","wait_ms":-1})"));
  CHECK_FALSE(waits("poll", R"({"op":"poll","wait_ms":"5"})"));
  CHECK_FALSE(waits("poll", R"({"op":"poll","wait_ms":1.5})"));
  CHECK_FALSE(waits("load", R"({"op":"load","wait_ms":5})"));
  CHECK_FALSE(waits("status", R"({"op":"status"})"));
}

TEST_CASE("the unknown_op message lists the ops in the documented order") {
  const Status error = UnknownOp("frobnicate");
  CHECK(error.code() == Status::Code::kUnknownOp);
  // docs/control-api.md, "Errors", shows this exact line.
  CHECK(error.message() ==
        "op 'frobnicate' is not known; ops: status, metrics, connect, disconnect, hello, register_region, publish, "
        "unpublish, lookup, flush, load, store, finish, poll");
  CHECK_THAT(ReadDoc(), Catch::Contains(error.message()));
}

TEST_CASE("the unknown_op message quotes a long op cut at a character boundary") {
  const std::string op = "x" + std::string(200, 'y');
  CHECK_THAT(UnknownOp(op).message(), Catch::StartsWith("op 'x" + std::string(63, 'y') + "' is not known"));
  std::string accented = "x";
  for (int i = 0; i < 100; ++i) accented += "\u00e9";
  std::string kept = "x";
  for (int i = 0; i < 31; ++i) kept += "\u00e9";
  CHECK_THAT(UnknownOp(accented).message(), Catch::StartsWith("op '" + kept + "' is not known"));
}

TEST_CASE("CheckOpAllowed refuses new work while draining, then engine ops without hello") {
  for (const ControlOp& op : ControlOps()) {
    const std::string name(op.name);
    CAPTURE(name);
    CHECK(CheckOpAllowed(op, false, true).ok());
    const Status draining = CheckOpAllowed(op, true, true);
    CHECK(!draining.ok() == op.is_new_work);
    if (!draining.ok()) {
      CHECK(draining.code() == Status::Code::kShuttingDown);
      CHECK(draining.message() == "the daemon is shutting down; op '" + name + "' is refused");
    }
    const Status no_hello = CheckOpAllowed(op, false, false);
    CHECK(!no_hello.ok() == op.needs_engine);
    if (!no_hello.ok()) {
      CHECK(no_hello.code() == Status::Code::kInvalid);
      CHECK(no_hello.message() == "op '" + name + "' needs an engine session: send hello first");
    }
    // Draining wins: a hello-less store is refused as new work.
    if (op.is_new_work) CHECK(CheckOpAllowed(op, true, false).code() == Status::Code::kShuttingDown);
  }
}

}  // namespace
}  // namespace kvpeer::daemon
