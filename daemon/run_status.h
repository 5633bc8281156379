// The "status" answer of the control socket (daemon/control_protocol.h's
// RunStatus), built from the controller's state, the recorder's run and every
// rank's view: a pure function, so what `runctl status` shows is unit-tested.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/control_protocol.h"
#include "daemon/job_config.h"
#include "daemon/run_controller.h"
#include "daemon/run_recorder.h"
#include "daemon/triage.h"

namespace holdfast {

RunStatus BuildRunStatus(const RunController& controller, const RunRecorder& recorder, const JobConfig& job,
                         const std::vector<RankView>& views, double uptime_s, int64_t now_ns);

}  // namespace holdfast
