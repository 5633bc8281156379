// daemon/munge_credential.h for a build without libmunge: TCP control is
// off (docs/control-protocol.md, "Trust"), and anything that asks says why.
#include "daemon/munge_credential.h"

#include <cstdlib>

namespace holdfast {

namespace {

Status NoMunge() {
  return FailedPreconditionError(
      "this holdfast was built without libmunge, so runctl cannot talk to holdfastd over TCP: install "
      "libmunge-dev (scripts/setup.sh) and rebuild, or run runctl on the leader's node");
}

}  // namespace

bool HaveMunge() { return false; }

std::string MungeSocket() {
  const char* env = std::getenv(kEnvMungeSocket);
  return env != nullptr ? env : "";
}

std::string MungeSocketName(const std::string& socket) { return socket.empty() ? "the default socket" : socket; }

Result<std::string> MungeEncode(const std::string&, std::string_view) { return NoMunge(); }

Result<MungeIdentity> MungeDecode(const std::string&, std::string_view) { return NoMunge(); }

}  // namespace holdfast
