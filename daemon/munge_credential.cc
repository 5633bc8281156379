#include "daemon/munge_credential.h"

#include <munge.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

namespace holdfast {

namespace {

struct CtxDeleter {
  void operator()(munge_ctx_t ctx) const { munge_ctx_destroy(ctx); }
};
using Ctx = std::unique_ptr<std::remove_pointer_t<munge_ctx_t>, CtxDeleter>;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

// socket= of an AuthInfo line in slurm.conf ("AuthInfo=socket=/x,ttl=60"), "" when none.
std::string SlurmMungeSocket() {
  const char* conf = std::getenv("SLURM_CONF");
  std::ifstream in(conf != nullptr && *conf != '\0' ? conf : "/etc/slurm/slurm.conf");
  std::string line;
  while (std::getline(in, line)) {
    line = Trim(line.substr(0, line.find('#')));
    const size_t eq = line.find('=');
    if (eq == std::string::npos || Lower(Trim(line.substr(0, eq))) != "authinfo") continue;
    std::stringstream parts(line.substr(eq + 1));
    for (std::string part; std::getline(parts, part, ',');) {
      part = Trim(part);
      if (Lower(part.substr(0, 7)) == "socket=") return Trim(part.substr(7));
    }
  }
  return "";
}

// The one place a munge_err_t becomes a Status. `ctx_text` is munged's own
// words for it (munge_ctx_strerror), often more precise than the code's.
Status MungeError(munge_err_t err, const char* ctx_text, const std::string& socket, const char* what) {
  const std::string words = ctx_text != nullptr && *ctx_text != '\0' ? ctx_text : munge_strerror(err);
  if (err == EMUNGE_SOCKET) {
    const std::string name = MungeSocketName(socket);
    return UnavailableError("munged is not reachable" +
                            (words.find(name) == std::string::npos ? " at " + name : std::string()) + " (" + words +
                            "): start munged on this node (the munge service, as every Slurm node runs it), or "
                            "set " + kEnvMungeSocket + " to its socket");
  }
  if (err == EMUNGE_BAD_CRED || err == EMUNGE_BAD_VERSION || err == EMUNGE_BAD_CIPHER || err == EMUNGE_BAD_MAC ||
      err == EMUNGE_BAD_ZIP || err == EMUNGE_BAD_REALM || err == EMUNGE_CRED_INVALID || err == EMUNGE_CRED_EXPIRED ||
      err == EMUNGE_CRED_REWOUND || err == EMUNGE_CRED_REPLAYED || err == EMUNGE_CRED_UNAUTHORIZED) {
    return InvalidArgumentError(std::string(what) + ": " + words);
  }
  return InternalError(std::string(what) + " (munged at " + MungeSocketName(socket) + "): " + words);
}

Result<Ctx> NewContext(const std::string& socket) {
  Ctx ctx(munge_ctx_create());
  if (ctx == nullptr) return InternalError("munge_ctx_create failed (out of memory)");
  if (!socket.empty()) {
    munge_err_t err = munge_ctx_set(ctx.get(), MUNGE_OPT_SOCKET, socket.c_str());
    if (err != EMUNGE_SUCCESS) return MungeError(err, munge_ctx_strerror(ctx.get()), socket, "set munged's socket");
  }
  return ctx;
}

}  // namespace

bool HaveMunge() { return true; }

std::string MungeSocket() {
  const char* env = std::getenv(kEnvMungeSocket);
  if (env != nullptr && *env != '\0') return env;
  return SlurmMungeSocket();
}

std::string MungeSocketName(const std::string& socket) {
  if (!socket.empty()) return socket;
  Ctx ctx(munge_ctx_create());
  char* path = nullptr;
  if (ctx != nullptr && munge_ctx_get(ctx.get(), MUNGE_OPT_SOCKET, &path) == EMUNGE_SUCCESS && path != nullptr) {
    return path;
  }
  return "libmunge's default socket";
}

Result<std::string> MungeEncode(const std::string& socket, std::string_view payload) {
  HF_ASSIGN_OR_RETURN(Ctx ctx, NewContext(socket));
  char* cred = nullptr;
  munge_err_t err = munge_encode(&cred, ctx.get(), payload.data(), static_cast<int>(payload.size()));
  if (err != EMUNGE_SUCCESS) {
    std::free(cred);
    return MungeError(err, munge_ctx_strerror(ctx.get()), socket, "munge_encode");
  }
  std::string out(cred);
  std::free(cred);
  return out;
}

Result<MungeIdentity> MungeDecode(const std::string& socket, std::string_view credential) {
  HF_ASSIGN_OR_RETURN(Ctx ctx, NewContext(socket));
  const std::string text(credential);  // munge_decode wants a NUL-terminated string
  void* buf = nullptr;
  int len = 0;
  MungeIdentity id;
  munge_err_t err = munge_decode(text.c_str(), ctx.get(), &buf, &len, &id.uid, &id.gid);
  if (buf != nullptr && len > 0) id.payload.assign(static_cast<const char*>(buf), static_cast<size_t>(len));
  std::free(buf);
  if (err != EMUNGE_SUCCESS) return MungeError(err, munge_ctx_strerror(ctx.get()), socket, "the MUNGE credential");
  return id;
}

}  // namespace holdfast
