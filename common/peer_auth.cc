#include "common/peer_auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace holdfast {

namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Status WriteAll(int fd, const std::string& text, const std::string& path) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("write " + path, errno);
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// A new key file at `path`, unless one appears first; the key it then holds.
Result<RunKey> CreateRunKey(const std::string& path) {
  HF_ASSIGN_OR_RETURN(RunKey key, RunKey::Generate());
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  ::unlink(tmp.c_str());  // a dead process's leftover of the same pid
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoError("create " + tmp, errno);
  Status s = WriteAll(fd, key.Hex() + "\n", tmp);
  if (s.ok() && ::fchmod(fd, 0600) != 0) s = ErrnoError("chmod 600 " + tmp, errno);  // whatever the umask
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoError("fsync " + tmp, errno);
  ::close(fd);
  if (s.ok() && ::link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST) {
    // A file system without hard links: rename, which replaces — only the leader creates the key.
    if (::rename(tmp.c_str(), path.c_str()) != 0) s = ErrnoError("rename " + tmp + " to " + path, errno);
  }
  ::unlink(tmp.c_str());
  HF_RETURN_IF_ERROR(s);
  return ReadRunKey(path);  // ours, or the one that was linked first
}

}  // namespace

Result<std::string> RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (n > 0 && RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    return InternalError("OpenSSL's random generator gave no bytes (RAND_bytes failed)");
  }
  return out;
}

std::string HexEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHexDigits[c >> 4]);
    out.push_back(kHexDigits[c & 0xf]);
  }
  return out;
}

Result<std::string> HexDecode(std::string_view hex) {
  if (hex.size() % 2 != 0) return InvalidArgumentError("hex text of odd length " + std::to_string(hex.size()));
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return InvalidArgumentError("not a hex digit at offset " + std::to_string(2 * i));
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HF_CHECK_MSG(EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) == 1, "EVP_Digest(SHA-256) failed");
  return HexEncode(std::string_view(reinterpret_cast<const char*>(md), len));
}

Result<RunKey> RunKey::Generate() {
  HF_ASSIGN_OR_RETURN(std::string bytes, RandomBytes(kRunKeyBytes));
  RunKey key;
  std::memcpy(key.bytes_.data(), bytes.data(), kRunKeyBytes);
  return key;
}

Result<RunKey> RunKey::FromHex(std::string_view hex) {
  if (hex.size() != 2 * kRunKeyBytes) {
    return InvalidArgumentError("a run key is " + std::to_string(2 * kRunKeyBytes) + " hex digits, got " +
                                std::to_string(hex.size()) + " characters");
  }
  HF_ASSIGN_OR_RETURN(std::string bytes, HexDecode(hex));
  RunKey key;
  std::memcpy(key.bytes_.data(), bytes.data(), kRunKeyBytes);
  return key;
}

std::string RunKey::Hex() const {
  return HexEncode(std::string_view(reinterpret_cast<const char*>(bytes_.data()), bytes_.size()));
}

std::string RunKey::Proof(std::string_view label, std::string_view a, std::string_view b) const {
  std::string msg;
  msg.reserve(label.size() + 1 + a.size() + b.size());
  msg.append(label).push_back('\0');
  msg.append(a).append(b);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HF_CHECK_MSG(HMAC(EVP_sha256(), bytes_.data(), static_cast<int>(bytes_.size()),
                    reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len) != nullptr &&
                   len == kAuthProofBytes,
               "HMAC-SHA256 failed");
  return std::string(reinterpret_cast<const char*>(out), len);
}

bool RunKey::Verify(std::string_view label, std::string_view a, std::string_view b, std::string_view proof) const {
  if (proof.size() != kAuthProofBytes) return false;
  const std::string want = Proof(label, a, b);
  return CRYPTO_memcmp(want.data(), proof.data(), kAuthProofBytes) == 0;
}

std::string RunKeyPath(const std::string& run_dir) { return run_dir + "/" + kRunKeyFileName; }

Result<RunKey> ReadRunKey(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) return NotFoundError("the run key " + path + " does not exist");
  if (fd < 0) return ErrnoError("open the run key " + path, errno);
  struct stat st {};
  Status s = ::fstat(fd, &st) == 0 ? Status::Ok() : ErrnoError("stat " + path, errno);
  if (s.ok() && !S_ISREG(st.st_mode)) s = FailedPreconditionError("the run key " + path + " is not a regular file");
  if (s.ok() && (st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    s = FailedPreconditionError("the run key " + path + " has mode " + mode +
                                ": other users may read it, so it proves nothing; `chmod 600 " + path +
                                "` (or delete it between runs: the next leader makes a new one)");
  }
  char buf[2 * kRunKeyBytes + 2];
  ssize_t n = 0;
  if (s.ok()) {
    do {
      n = ::read(fd, buf, sizeof(buf));
    } while (n < 0 && errno == EINTR);
    if (n < 0) s = ErrnoError("read " + path, errno);
  }
  ::close(fd);
  HF_RETURN_IF_ERROR(s);
  std::string_view text(buf, static_cast<size_t>(n));
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  Result<RunKey> key = RunKey::FromHex(text);
  if (!key.ok()) return InvalidArgumentError("the run key " + path + " holds no key: " + key.status().message());
  return key;
}

Result<RunKey> EnsureRunKey(const std::string& path) {
  Result<RunKey> key = ReadRunKey(path);
  if (key.ok() || key.status().code() != StatusCode::kNotFound) return key;
  return CreateRunKey(path);
}

}  // namespace holdfast
