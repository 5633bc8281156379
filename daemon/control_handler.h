// ControlHandler: what holdfastd answers on its control socket (docs/
// control-protocol.md) once ControlServer has parsed a request and read the
// peer's uid (from the Unix socket, or a TCP request's MUNGE credential). It
// decides who may do what (anyone who reaches it may ping; looking at the run
// and acting on it are for the daemon's own user or root, as lineage.db is
// theirs alone),
// whether the request is about this daemon's run at all (RequestNamesRun),
// and whether the run can do it now (a checkpoint needs running ranks); only
// then does it ask its ControlTarget — the Supervisor — to act. A refused
// request changes nothing.
//
// Thread-safety: none; called on the daemon's event-loop thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "daemon/control_protocol.h"

namespace holdfast {

// What the control handler acts on (the Supervisor; a recording double in tests).
class ControlTarget {
 public:
  virtual ~ControlTarget() = default;
  virtual const std::string& run_id() const = 0;
  virtual RunStatus BuildStatus() const = 0;
  // Whether this generation's ranks are running (not starting, stopping or backing off).
  virtual bool RanksRunning() const = 0;
  // Tells every rank to save a checkpoint after the step they all agree on;
  // returns the newest step any rank has completed. Only while RanksRunning().
  virtual int64_t RequestCheckpoint() = 0;
  // An operator's stop: the run ends after the ranks stop (RunController::OnStopRequest).
  virtual void RequestStop(const std::string& why) = 0;
};

class ControlHandler {
 public:
  // `target` is not owned and must outlive the handler; `owner_uid` is the
  // daemon's own uid (getuid()), the user who may act on the run.
  ControlHandler(ControlTarget* target, uid_t owner_uid) : target_(target), owner_uid_(owner_uid) {}

  // The encoded response line for `request` from a peer running as `peer_uid`.
  std::string Handle(const ControlRequest& request, uid_t peer_uid) const;

 private:
  ControlTarget* target_;  // not owned
  const uid_t owner_uid_;
};

}  // namespace holdfast
