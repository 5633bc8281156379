// The TCP store's wire format, shared by client (tcp_store.cc) and server
// (tcp_store_server.cc). Internal: nothing outside common/ includes this.
//
// Every message is an 8-byte header followed by `length` body bytes:
//   'H' 'S' version(2) type  length(u32, little-endian)
// A connection opens with the run key's challenge-response (common/peer_auth.h):
//   server -> client  kChallenge  server nonce (32 bytes)
//   client -> server  kAuth       client nonce (32) + HMAC(key, kClientLabel, server nonce, client nonce) (32)
//   server -> client  kReplyOk    HMAC(key, kServerLabel, server nonce, client nonce) (32)
// or kReplyError and a close when the proof is wrong or another request
// comes first; only then do requests follow.
// Request bodies (integers little-endian, strings as u32 length + bytes):
//   kSet    key, value (the rest of the body)
//   kGet    timeout_ms(u64), key
//   kAdd    delta(i64), key
//   kWait   timeout_ms(u64), count(u32), count x key
//   kCheck  key
//   kDelete key
// Reply: kReplyOk with a payload (kGet: the value; kAdd: i64; kCheck: u8; else
// empty) or kReplyError with code(u8, a StatusCode) + message text. A client
// sends one request and reads its reply before sending the next; the server
// answers a malformed or oversized message with kReplyError and closes that
// connection. Version changes bump kVersion; a server refuses other versions
// (v1 had no handshake).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace holdfast {
namespace tcp_store_wire {

constexpr uint8_t kMagic0 = 'H';
constexpr uint8_t kMagic1 = 'S';
constexpr uint8_t kVersion = 2;
constexpr size_t kHeaderBytes = 8;
constexpr size_t kMaxKeyBytes = 4 * 1024;
constexpr size_t kMaxValueBytes = 64 * 1024 * 1024;
constexpr size_t kMaxWaitKeys = 1024;
// The largest body either side accepts: a maximal value plus its key and fields.
constexpr size_t kMaxBodyBytes = kMaxValueBytes + kMaxKeyBytes + 64;
// Timeouts on the wire are clamped to this so deadlines never overflow.
constexpr uint64_t kMaxTimeoutMs = uint64_t{30} * 24 * 3600 * 1000;

enum MsgType : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kWait = 4,
  kCheck = 5,
  kDelete = 6,
  kAuth = 7,
  kReplyOk = 0x80,
  kReplyError = 0x81,
  kChallenge = 0x82,
};

// The labels of the two proofs (common/peer_auth.h RunKey::Proof).
inline constexpr char kClientLabel[] = "holdfast store v2 client";
inline constexpr char kServerLabel[] = "holdfast store v2 server";

inline bool IsRequest(uint8_t t) { return t >= kSet && t <= kDelete; }

inline const char* MsgTypeName(uint8_t t) {
  switch (t) {
    case kSet: return "Set";
    case kGet: return "Get";
    case kAdd: return "Add";
    case kWait: return "Wait";
    case kCheck: return "Check";
    case kDelete: return "Delete";
    case kAuth: return "Auth";
    default: return "?";
  }
}

inline void EncodeHeader(uint8_t type, uint32_t length, uint8_t* out) {
  out[0] = kMagic0;
  out[1] = kMagic1;
  out[2] = kVersion;
  out[3] = type;
  for (int i = 0; i < 4; ++i) out[4 + i] = static_cast<uint8_t>(length >> (8 * i));
}

inline uint32_t HeaderLength(const uint8_t* h) {
  return uint32_t{h[4]} | uint32_t{h[5]} << 8 | uint32_t{h[6]} << 16 | uint32_t{h[7]} << 24;
}

// Appends fields to a body.
class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(v); }
  void U32(uint32_t v) { Int(v, 4); }
  void U64(uint64_t v) { Int(v, 8); }
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    out_->insert(out_->end(), s.begin(), s.end());
  }
  void Raw(const uint8_t* p, size_t n) { out_->insert(out_->end(), p, p + n); }

 private:
  void Int(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_->push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t>* out_;  // not owned
};

// Reads fields from a body; any short read or oversized key sets !ok().
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool ok() const { return ok_; }
  size_t remaining() const { return n_ - pos_; }
  uint8_t U8() { return static_cast<uint8_t>(Int(1)); }
  uint32_t U32() { return static_cast<uint32_t>(Int(4)); }
  uint64_t U64() { return Int(8); }
  std::string Key() {
    uint32_t len = U32();
    if (!ok_ || len > kMaxKeyBytes || len > remaining()) {
      ok_ = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }
  const uint8_t* Rest() const { return p_ + pos_; }

 private:
  uint64_t Int(int bytes) {
    if (!ok_ || remaining() < static_cast<size_t>(bytes)) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t{p_[pos_ + i]} << (8 * i);
    pos_ += bytes;
    return v;
  }
  const uint8_t* p_;  // not owned
  size_t n_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace tcp_store_wire
}  // namespace holdfast
