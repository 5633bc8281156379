#include "common/proc_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>

namespace holdfast {

ProcState ProcStateFromLetter(char c) {
  switch (c) {
    case 'R': return ProcState::kRunning;
    case 'S':
    case 'I': return ProcState::kSleeping;
    case 'D': return ProcState::kDiskWait;
    case 'T': return ProcState::kStopped;
    case 't': return ProcState::kTraced;
    case 'Z': return ProcState::kZombie;
    case 'X':
    case 'x': return ProcState::kGone;
    default: return ProcState::kUnknown;
  }
}

char ProcStateLetter(ProcState s) {
  switch (s) {
    case ProcState::kRunning: return 'R';
    case ProcState::kSleeping: return 'S';
    case ProcState::kDiskWait: return 'D';
    case ProcState::kStopped: return 'T';
    case ProcState::kTraced: return 't';
    case ProcState::kZombie: return 'Z';
    case ProcState::kGone: return 'X';
    case ProcState::kUnknown: return '?';
  }
  return '?';
}

const char* ProcStateWords(ProcState s) {
  switch (s) {
    case ProcState::kStopped: return "process stopped (SIGSTOP?)";
    case ProcState::kTraced: return "process stopped by a tracer";
    case ProcState::kDiskWait: return "process in uninterruptible I/O";
    case ProcState::kZombie: return "process is a zombie";
    case ProcState::kGone: return "process is gone";
    default: return nullptr;
  }
}

ProcState ReadProcState(pid_t pid) {
  if (pid <= 0) return ProcState::kUnknown;
  // open/read, not an ifstream: the leader reads its ranks' states every poll.
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ProcState::kGone;
  // "pid (comm) S ...": comm is at most 15 bytes, so the state is in the first
  // 64; the fields after it hold no ')'.
  char buf[256];
  ssize_t got;
  do {
    got = ::read(fd, buf, sizeof(buf));
  } while (got < 0 && errno == EINTR);
  ::close(fd);
  if (got <= 0) return ProcState::kGone;
  const std::string_view text(buf, static_cast<size_t>(got));
  // The command name may hold ')' and spaces: the state follows the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return ProcState::kUnknown;
  return ProcStateFromLetter(text[close + 2]);
}

}  // namespace holdfast
