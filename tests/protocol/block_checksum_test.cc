// block_data.xxh3 (wire-protocol.md section 7): the hash itself, its hex
// form, and how the decoder records a present, absent or malformed array
// without failing the frame (whether the feature is on is the session's call).
#include <cstddef>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "protocol/block_checksum.h"
#include "protocol/codec.h"
#include "protocol/messages.h"
#include "tests/protocol/codec_test_util.h"

namespace kvpeer::protocol {
namespace {

using boost::json::array;
using testing::Decode;
using testing::HeaderWith;
using testing::kBlockLen;
using State = BlockChecksums::State;

BlockData DecodeBlockData(const std::string& json) {
  Message message;
  const Status status = Decode(json, 3 * kBlockLen, kBlockLen, &message);
  INFO(status.message());
  REQUIRE(status.ok());
  return std::get<BlockData>(message);
}

TEST_CASE("BlockChecksum is XXH3-64 with seed 0", "[checksum]") {
  // Published XXH3-64 test vector: the empty input with seed 0.
  CHECK(BlockChecksum({}) == 0x2D06800538D394C2ull);
  std::vector<std::byte> block(kBlockLen, std::byte{0x5a});
  const uint64_t before = BlockChecksum(block);
  block[kBlockLen - 1] ^= std::byte{1};  // the last bit of the last byte counts
  CHECK(BlockChecksum(block) != before);
}

TEST_CASE("ChecksumHex is 16 lowercase digits with leading zeros", "[checksum]") {
  CHECK(ChecksumHex(0) == "0000000000000000");
  CHECK(ChecksumHex(0xabcull) == "0000000000000abc");
  CHECK(ChecksumHex(0xFEDCBA9876543210ull) == "fedcba9876543210");
}

TEST_CASE("block_data xxh3 round-trips when valid", "[checksum][codec]") {
  BlockData sent = testing::ValidBlockData();  // 3 blocks
  sent.xxh3 = BlockChecksums::Of({0, 0xabcull, ~0ull});
  const std::string json = EncodeHeader(sent);
  CHECK(json.find("\"xxh3\":[\"0000000000000000\",\"0000000000000abc\",\"ffffffffffffffff\"]") != std::string::npos);
  CHECK(DecodeBlockData(json) == sent);
}

TEST_CASE("block_data without xxh3 decodes as absent and encodes nothing", "[checksum][codec]") {
  const std::string json = EncodeHeader(testing::ValidBlockData());
  CHECK(json.find("xxh3") == std::string::npos);
  CHECK(DecodeBlockData(json).xxh3.state == State::kAbsent);
}

TEST_CASE("a malformed xxh3 is recorded with what was wrong, never a decode failure", "[checksum][codec]") {
  const BlockData base = testing::ValidBlockData();  // 3 blocks
  const std::string good = "0123456789abcdef";
  struct Case {
    boost::json::value value;
    std::string problem;
  };
  const std::vector<Case> cases = {
      {"0123456789abcdef", "xxh3: must be an array, not a string"},
      {array{good, good}, "xxh3: must have one element per block (3), has 2"},
      {array{good, good, good, good}, "xxh3: must have one element per block (3), has 4"},
      {array{good, 7, good}, "xxh3[1]: must be a string, not an integer"},
      {array{good, good, "0123456789ABCDEF"}, "xxh3[2]: must be 16 lowercase hex digits"},
      {array{"123456789abcdef", good, good}, "xxh3[0]: must be 16 lowercase hex digits"},
      {array{good, "0123456789abcdef0", good}, "xxh3[1]: must be 16 lowercase hex digits"},
      {array{good, good, "-123456789abcdef"}, "xxh3[2]: must be 16 lowercase hex digits"},
  };
  for (const Case& c : cases) {
    INFO(c.problem);
    const BlockData decoded = DecodeBlockData(HeaderWith(base, "xxh3", c.value));
    CHECK(decoded.xxh3.state == State::kMalformed);
    CHECK(decoded.xxh3.problem == c.problem);
    CHECK(decoded.xxh3.values.empty());
  }
}

}  // namespace
}  // namespace kvpeer::protocol
