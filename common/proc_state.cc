#include "common/proc_state.h"

#include <fstream>
#include <iterator>
#include <string>

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
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return ProcState::kGone;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name may hold ')' and spaces: the state follows the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return ProcState::kUnknown;
  return ProcStateFromLetter(text[close + 2]);
}

}  // namespace holdfast
