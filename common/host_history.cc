#include "common/host_history.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "common/atomic_file.h"
#include "common/utf8.h"

namespace holdfast {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxText = 2000;
constexpr off_t kMaxFileBytes = 64 * 1024;
constexpr const char kHistorySubdir[] = ".holdfast/hosts";

std::string Cut(const std::string& s) {
  std::string v = ValidUtf8(s);
  if (v.size() <= kMaxText) return v;
  v.resize(kMaxText);
  return ValidUtf8(v) + " [cut]";  // a sequence cut in half becomes U+FFFD
}

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::char_traits<char>::length(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Creates `dir` and the parents it lacks; each new one gets 1777 when its
// parent is sticky and world-writable, else 0755 (less the umask).
Status MakeDirs(const std::string& dir) {
  std::vector<std::filesystem::path> missing;
  std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
  struct stat st;
  while (!p.empty() && ::stat(p.c_str(), &st) != 0) {
    if (errno != ENOENT) return ErrnoError("stat " + p.string(), errno);
    missing.push_back(p);
    if (p == p.parent_path()) break;
    p = p.parent_path();
  }
  if (missing.empty() && !S_ISDIR(st.st_mode)) return IoError(p.string() + " is not a directory");
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    struct stat parent;
    const bool shared = ::stat(it->parent_path().c_str(), &parent) == 0 && (parent.st_mode & S_ISVTX) != 0 &&
                        (parent.st_mode & S_IWOTH) != 0;
    if (::mkdir(it->c_str(), shared ? 01777 : 0755) != 0 && errno != EEXIST) {
      return ErrnoError("create " + it->string(), errno);
    }
    if (shared) (void)::chmod(it->c_str(), 01777);  // the umask took bits off
  }
  return Status::Ok();
}

template <typename T>
Status Get(const json& j, const char* key, T* out, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    return required ? InvalidArgumentError(std::string("missing key '") + key + "'") : Status::Ok();
  }
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return InvalidArgumentError(std::string("key '") + key + "': expected a string");
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return InvalidArgumentError(std::string("key '") + key + "': expected true or false");
  } else {
    if (!it->is_number_integer()) return InvalidArgumentError(std::string("key '") + key + "': expected an integer");
  }
  *out = it->get<T>();
  return Status::Ok();
}

Status GetOpt(const json& j, const char* key, std::optional<int>* out) {
  int v = 0;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  HF_RETURN_IF_ERROR(Get(j, key, &v, true));
  *out = v;
  return Status::Ok();
}

// The whole of a regular file (no link followed), at most kMaxFileBytes; its owner in *uid.
Result<std::string> ReadSmallFile(const std::string& path, int64_t* uid) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoError("open", errno);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError("not a regular file");
  }
  if (st.st_size > kMaxFileBytes) {
    ::close(fd);
    return InvalidArgumentError("larger than 64 KiB: not a history file");
  }
  *uid = static_cast<int64_t>(st.st_uid);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(done);
  return text;
}

}  // namespace

Status CheckHistoryHost(std::string_view host) {
  if (host.empty()) return InvalidArgumentError("empty host name");
  if (host.size() > 255) return InvalidArgumentError("host name longer than 255 bytes");
  if (host == "." || host == "..") return InvalidArgumentError("host name '" + std::string(host) + "'");
  for (char c : host) {
    if (c == '/' || static_cast<unsigned char>(c) < 0x20) {
      return InvalidArgumentError("host name '" + ValidUtf8(host) + "' holds '/' or a control character");
    }
  }
  return Status::Ok();
}

std::string HostIncidentFileName(const HostIncident& i) {
  char t[32];
  std::snprintf(t, sizeof(t), "%016lld", static_cast<long long>(std::max<int64_t>(0, i.time_ms)));
  return std::string(t) + "-" + i.run_id + "-" + std::to_string(i.event_id) + ".json";
}

std::string DefaultHistoryDir(const std::string& run_dir) {
  std::filesystem::path p = std::filesystem::absolute(run_dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "runs/r1/"
  return (p.parent_path() / kHistorySubdir).string();
}

std::string HostIncidentToJson(const HostIncident& i) {
  auto opt = [](const std::optional<int>& v) { return v ? json(*v) : json(nullptr); };
  json j = {{"version", kHostHistoryVersion},
            {"host", ValidUtf8(i.host)},
            {"credited", i.credited},
            {"time_ms", i.time_ms},
            {"kind", ValidUtf8(i.kind)},
            {"run_id", ValidUtf8(i.run_id)},
            {"run_name", Cut(i.run_name)},
            {"run_dir", Cut(i.run_dir)},
            {"event_id", i.event_id},
            {"attempt", opt(i.attempt)},
            {"generation", opt(i.generation)},
            {"rank", opt(i.rank)},
            {"slurm_job_id", ValidUtf8(i.slurm_job_id)},
            {"summary", Cut(i.summary)},
            {"action", Cut(i.action)}};
  return j.dump() + "\n";
}

Result<HostIncident> ParseHostIncident(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  // Never the parser's own message: it quotes what it read, and a Prolog running as
  // root must not echo a file it was tricked into reading.
  if (j.is_discarded()) return InvalidArgumentError("not JSON (a file cut short, or not a history file)");
  if (!j.is_object()) return InvalidArgumentError("not a JSON object");
  int version = 0;
  HF_RETURN_IF_ERROR(Get(j, "version", &version, true));
  if (version != kHostHistoryVersion) {
    return InvalidArgumentError("version " + std::to_string(version) + "; this build reads version " +
                                std::to_string(kHostHistoryVersion));
  }
  HostIncident i;
  HF_RETURN_IF_ERROR(Get(j, "host", &i.host, true));
  HF_RETURN_IF_ERROR(Get(j, "credited", &i.credited, false));
  HF_RETURN_IF_ERROR(Get(j, "time_ms", &i.time_ms, true));
  HF_RETURN_IF_ERROR(Get(j, "kind", &i.kind, true));
  HF_RETURN_IF_ERROR(Get(j, "run_id", &i.run_id, true));
  HF_RETURN_IF_ERROR(Get(j, "run_name", &i.run_name, false));
  HF_RETURN_IF_ERROR(Get(j, "run_dir", &i.run_dir, false));
  HF_RETURN_IF_ERROR(Get(j, "event_id", &i.event_id, false));
  HF_RETURN_IF_ERROR(GetOpt(j, "attempt", &i.attempt));
  HF_RETURN_IF_ERROR(GetOpt(j, "generation", &i.generation));
  HF_RETURN_IF_ERROR(GetOpt(j, "rank", &i.rank));
  HF_RETURN_IF_ERROR(Get(j, "slurm_job_id", &i.slurm_job_id, false));
  HF_RETURN_IF_ERROR(Get(j, "summary", &i.summary, false));
  HF_RETURN_IF_ERROR(Get(j, "action", &i.action, false));
  return i;
}

Status PublishHostIncident(const std::string& history_dir, const HostIncident& incident) {
  HF_RETURN_IF_ERROR(CheckHistoryHost(incident.host));
  if (incident.run_id.empty() || incident.run_id.find('/') != std::string::npos) {
    return InvalidArgumentError("run id '" + incident.run_id + "' cannot name a history file");
  }
  const std::string dir = history_dir + "/" + incident.host;
  HF_RETURN_IF_ERROR(MakeDirs(dir).WithContext("host history"));
  return WriteFileAtomically(dir + "/" + HostIncidentFileName(incident), HostIncidentToJson(incident), 0644,
                             /*durable=*/true)
      .WithContext("host history");
}

Result<HostHistory> ReadHostHistory(const std::string& history_dir, const std::string& host) {
  HF_RETURN_IF_ERROR(CheckHistoryHost(host));
  HostHistory h;
  h.host = host;
  const std::string dir = history_dir + "/" + host;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return h;
    return ErrnoError("list " + dir, errno);
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.' || !EndsWith(name, ".json")) continue;  // temporaries: *.json.tmp.PID
    names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    int64_t uid = -1;
    Result<std::string> text = ReadSmallFile(path, &uid);
    Result<HostIncident> i = text.ok() ? ParseHostIncident(*text) : Result<HostIncident>(text.status());
    if (i.ok() && i->host != host) i = InvalidArgumentError("names host '" + ValidUtf8(i->host) + "'");
    if (!i.ok()) {
      h.skipped.push_back(path + ": " + i.status().message());
      continue;
    }
    i->file = path;
    i->owner_uid = uid;
    h.incidents.push_back(std::move(i).value());
  }
  std::stable_sort(h.incidents.begin(), h.incidents.end(),
                   [](const HostIncident& a, const HostIncident& b) { return a.time_ms < b.time_ms; });
  return h;
}

Result<std::vector<std::string>> HistoryHosts(const std::string& history_dir) {
  std::vector<std::string> hosts;
  DIR* d = ::opendir(history_dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return hosts;
    return ErrnoError("list " + history_dir, errno);
  }
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    struct stat st;
    if (name.empty() || name[0] == '.' || !CheckHistoryHost(name).ok()) continue;
    if (::lstat((history_dir + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) hosts.push_back(name);
  }
  ::closedir(d);
  std::sort(hosts.begin(), hosts.end());
  return hosts;
}

std::string FindHistoryDir(const std::string& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir).lexically_normal();
  for (;;) {
    std::error_code ec;
    const std::filesystem::path candidate = p / kHistorySubdir;
    if (std::filesystem::is_directory(candidate, ec)) return candidate.string();
    if (p == p.parent_path() || p.empty()) return "";
    p = p.parent_path();
  }
}

Status CheckHistoryRule(const HistoryRule& rule) {
  if (rule.runs < 1) return InvalidArgumentError("history runs must be at least 1, got " + std::to_string(rule.runs));
  if (!(rule.window_days > 0) || rule.window_days > 3650) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%g", rule.window_days);
    return InvalidArgumentError(std::string("history window must be more than 0 and at most 3650 days, got ") + buf);
  }
  return Status::Ok();
}

HostVerdict JudgeHost(const HostHistory& history, const HistoryRule& rule, int64_t now_ms) {
  HostVerdict v;
  v.window_start_ms = now_ms - static_cast<int64_t>(rule.window_days * 86'400'000.0);
  for (auto it = history.incidents.rbegin(); it != history.incidents.rend(); ++it) {
    if (it->time_ms < v.window_start_ms) continue;
    if (!it->credited) {
      ++v.involved;
      continue;
    }
    ++v.credited;
    if (std::find(v.runs.begin(), v.runs.end(), it->run_id) == v.runs.end()) v.runs.push_back(it->run_id);
  }
  v.flagged = static_cast<int>(v.runs.size()) >= rule.runs;
  return v;
}

std::string VerdictText(const std::string& host, const HostVerdict& v, const HistoryRule& rule) {
  char days[32];
  std::snprintf(days, sizeof(days), "%g day%s", rule.window_days, rule.window_days == 1 ? "" : "s");
  std::string runs;
  for (const std::string& r : v.runs) runs += (runs.empty() ? "" : ", ") + r;
  const std::string n = std::to_string(v.runs.size()) + (v.runs.size() == 1 ? " run" : " runs");
  if (v.flagged) return host + " was credited with incidents in " + n + " within " + days + " (" + runs + ")";
  return host + " was credited with incidents in " + n + " within " + days + (runs.empty() ? "" : " (" + runs + ")") +
         "; flagged at " + std::to_string(rule.runs);
}

}  // namespace holdfast
