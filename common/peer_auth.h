// Peer authentication with a run's key: the secret the daemons of one run and
// their ranks share, so that the cluster port (daemon/leader_link.h) and the
// rendezvous store (common/tcp_store.h) take only peers that hold it
// (docs/cluster-protocol.md, "Trust").
//
// The key is 32 random bytes kept, as 64 hex digits and a newline, in
// RUN_DIR/cluster.key, mode 0600, readable by the run's owner (and root)
// only. The leading holdfastd creates it once per run directory
// (EnsureRunKey); followers read it from the shared run directory, ranks from
// the file HOLDFAST_STORE_KEY_FILE names. Nothing sends the key itself: a
// peer proves it holds it by answering a fresh random challenge with
// HMAC-SHA256(key, label, challenge, its own nonce), and the side that
// challenged proves it back the same way with another label, so neither end
// talks to an impostor and a recorded exchange cannot be replayed (each side
// brings a new nonce). OpenSSL (libcrypto) does the cryptography: the random
// bytes, the HMAC, the constant-time comparison and SHA-256.
//
// Thread-safety: a RunKey is an immutable value; every function here may be
// called from any thread at once.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace holdfast {

inline constexpr size_t kRunKeyBytes = 32;
inline constexpr size_t kAuthNonceBytes = 32;
inline constexpr size_t kAuthProofBytes = 32;  // HMAC-SHA256
inline constexpr char kRunKeyFileName[] = "cluster.key";

class RunKey {
 public:
  // A new random key (OpenSSL's CSPRNG). kInternal if it cannot give one.
  static Result<RunKey> Generate();
  // 64 hex digits (either case); kInvalidArgument otherwise.
  static Result<RunKey> FromHex(std::string_view hex);

  std::string Hex() const;  // 64 lowercase hex digits

  // HMAC-SHA256(key, label || '\0' || a || b): kAuthProofBytes raw bytes.
  // `label` says who proves what ("holdfast store v2 client"), so that a proof
  // made for one side or one protocol is worth nothing for another.
  std::string Proof(std::string_view label, std::string_view a, std::string_view b) const;
  // Whether `proof` is Proof(label, a, b), compared in constant time.
  bool Verify(std::string_view label, std::string_view a, std::string_view b, std::string_view proof) const;

 private:
  RunKey() = default;
  std::array<uint8_t, kRunKeyBytes> bytes_{};
};

// RUN_DIR/cluster.key.
std::string RunKeyPath(const std::string& run_dir);

// Reads a key file. kNotFound when it does not exist; kFailedPrecondition
// when other users may read it (its mode has group or other bits: the
// message says to chmod 600) or it is not a regular file; kInvalidArgument
// when it does not hold a key; each message names the path.
Result<RunKey> ReadRunKey(const std::string& path);
// The key in `path`, created (0600, owner only) when the file does not exist
// yet. The new file appears whole or not at all (written beside it, then
// linked into place), and when two processes create it at once both end with
// the same key: the one that linked first.
Result<RunKey> EnsureRunKey(const std::string& path);

// `n` random bytes (OpenSSL's CSPRNG). kInternal if it cannot give them.
Result<std::string> RandomBytes(size_t n);
std::string HexEncode(std::string_view bytes);               // lowercase
Result<std::string> HexDecode(std::string_view hex);         // kInvalidArgument on a bad digit or odd length
std::string Sha256Hex(std::string_view data);                // 64 lowercase hex digits

}  // namespace holdfast
