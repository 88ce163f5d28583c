// docs/operations.md, "Every key", against the option table: one row per
// option in table order, the table's default, the reload column from the
// reloadable flag, and each bounded option's range. A failure names the
// option that differs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "config/settings.h"
#include "test_files.h"

#ifndef KVPEER_EXAMPLE_CONFIG
#error "KVPEER_EXAMPLE_CONFIG must name config/kvpeerd.example.toml"
#endif

namespace kvpeer::config {
namespace {

using testing::Contains;

// The docs sit beside config/ in the source tree.
std::string OperationsPath() {
  std::string path = KVPEER_EXAMPLE_CONFIG;
  const std::string suffix = "config/kvpeerd.example.toml";
  REQUIRE(path.ends_with(suffix));
  return path.substr(0, path.size() - suffix.size()) + "docs/operations.md";
}

struct DocRow {
  std::string key;
  std::string default_text;
  std::string meaning;
  std::string reload;
};

std::string Trim(std::string text) {
  const size_t begin = text.find_first_not_of(' ');
  const size_t end = text.find_last_not_of(' ');
  return begin == std::string::npos ? "" : text.substr(begin, end - begin + 1);
}

std::string Unquoted(std::string text) {
  std::erase(text, '`');
  return text;
}

// "| `key` | default | meaning | reload |": the meaning may hold '|'.
DocRow ParseRow(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream in(line.substr(1, line.rfind('|') - 1));
  for (std::string cell; std::getline(in, cell, '|');) cells.push_back(Trim(cell));
  REQUIRE(cells.size() >= 4);
  std::string meaning = cells[2];
  for (size_t i = 3; i + 1 < cells.size(); ++i) meaning += "|" + cells[i];
  return {Unquoted(cells[0]), cells[1], meaning, cells.back()};
}

// The rows of the table under "### Every key".
std::vector<DocRow> DocRows() {
  std::ifstream in(OperationsPath());
  REQUIRE(in.good());
  std::vector<DocRow> rows;
  bool in_section = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("#")) in_section = line == "### Every key";
    if (in_section && line.starts_with("| `")) rows.push_back(ParseRow(line));
  }
  return rows;
}

std::string Where(const std::string& key) { return "docs/operations.md, \"Every key\", option '" + key + "': "; }

TEST_CASE("docs/operations.md lists every option once, in table order") {
  const std::vector<DocRow> rows = DocRows();
  for (size_t i = 0; i < std::max(rows.size(), Options().size()); ++i) {
    const std::string documented = i < rows.size() ? rows[i].key : "(no row)";
    const std::string table = i < Options().size() ? std::string(Options()[i].name) : "(no option)";
    INFO("docs/operations.md, \"Every key\", row " << i + 1 << ": documents '" << documented
                                                   << "' where the option table has '" << table << "'");
    CHECK(documented == table);
  }
}

TEST_CASE("docs/operations.md gives each option's default, reload and range as the table has them") {
  for (const DocRow& row : DocRows()) {
    const auto option =
        std::find_if(Options().begin(), Options().end(), [&](const OptionSpec& o) { return o.name == row.key; });
    {
      INFO(Where(row.key) << "not in the option table");
      REQUIRE(option != Options().end());
    }
    if (!option->default_text.empty()) {
      INFO(Where(row.key) << "default '" << row.default_text << "', the table has '" << option->default_text << "'");
      CHECK(Unquoted(row.default_text) == option->default_text);
    }
    const std::string reload = !option->in_config_file ? "—" : option->reloadable ? "**live**" : "restart";
    {
      INFO(Where(row.key) << "reload '" << row.reload << "', the table has '" << reload << "'");
      CHECK(row.reload.starts_with(reload));
    }
    if (option->bounded()) {
      INFO(Where(row.key) << "the meaning must state the range " << option->RangeText());
      CHECK(Contains(row.meaning, option->RangeText()));
    }
  }
}

}  // namespace
}  // namespace kvpeer::config
