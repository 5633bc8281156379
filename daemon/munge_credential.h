// MUNGE credentials: who a control request over TCP comes from
// (docs/control-protocol.md, "Trust").
//
// MUNGE is the credential Slurm itself uses: munged on every node of a
// cluster shares one key, and a credential one node's munged encodes names
// the uid and gid of the process that asked for it, which any node's munged
// can decode. runctl asks its node's munged for a credential over a payload
// that names the request (daemon/control_auth.h); the leading holdfastd asks
// its node's munged to decode it and so learns the caller's uid, with the
// same certainty SO_PEERCRED gives on the Unix socket. munged refuses a
// credential decoded twice (its replay cache) or older than its time to live
// (300 s by default), so a credential seen on the wire is worth nothing
// afterwards. libmunge (Debian: libmunge-dev) is wrapped here, its errors
// turned into Status in one place; a build without it
// (munge_credential_none.cc) says so whenever asked.
//
// Thread-safety: every function may be called from any thread at once (each
// call makes its own libmunge context). Each blocks on a round trip to
// munged's Unix socket.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/status.h"

namespace holdfast {

// The environment variable that names munged's socket, when it is not where
// libmunge looks by default.
inline constexpr char kEnvMungeSocket[] = "HOLDFAST_MUNGE_SOCKET";

// Whether this build has libmunge.
bool HaveMunge();

// The munged socket holdfast talks to: $HOLDFAST_MUNGE_SOCKET when set; else
// the socket= of Slurm's AuthInfo in slurm.conf ($SLURM_CONF, else
// /etc/slurm/slurm.conf), where a site that moved munged's socket says so for
// Slurm; else "" (libmunge's default, /run/munge/munge.socket.2).
std::string MungeSocket();
// The socket's path for messages: `socket`, or libmunge's default when "".
std::string MungeSocketName(const std::string& socket);

struct MungeIdentity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string payload;
};

// A credential for `payload` from munged at `socket` ("" = the default), as
// the text munged returns ("MUNGE:...:"). kUnavailable when munged cannot be
// reached, with what to do (start it, or point HOLDFAST_MUNGE_SOCKET at it).
Result<std::string> MungeEncode(const std::string& socket, std::string_view payload);
// The uid, gid and payload of `credential`, decoded by munged at `socket`.
// kUnavailable when munged cannot be reached; kInvalidArgument, naming
// munged's reason, when the credential does not decode: malformed, made with
// another key, expired, replayed (decoded before), or from the future.
Result<MungeIdentity> MungeDecode(const std::string& socket, std::string_view credential);

}  // namespace holdfast
