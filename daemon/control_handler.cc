#include "daemon/control_handler.h"

#include <nlohmann/json.hpp>

namespace holdfast {

std::string ControlHandler::Handle(const ControlRequest& req, uid_t peer_uid) const {
  if (req.op != control_op::kPing) {
    Status allowed = CheckPeerAllowed(peer_uid, owner_uid_);
    if (!allowed.ok()) return EncodeErrorResponse(req.id, ControlErrorCode::kPermissionDenied, allowed.message());
  }
  if (req.op == control_op::kPing) return EncodeOkResponse(req.id, "{}");
  if (!RequestNamesRun(req, target_->run_id())) {
    // A request about another run must not act on this one.
    return EncodeErrorResponse(req.id, ControlErrorCode::kFailedPrecondition,
                               "this holdfastd supervises run " + target_->run_id() + ", not " + *req.run_id);
  }
  if (req.op == control_op::kStatus) return EncodeOkResponse(req.id, EncodeStatusResult(target_->BuildStatus()));
  if (req.op == control_op::kCheckpoint) {
    if (!target_->RanksRunning()) {
      return EncodeErrorResponse(req.id, ControlErrorCode::kFailedPrecondition, "no ranks are running right now");
    }
    const int64_t step = target_->RequestCheckpoint();
    return EncodeOkResponse(req.id, nlohmann::json{{"requested_at_step", step}}.dump());
  }
  if (req.op == control_op::kStop) {
    target_->RequestStop("stopped with runctl");
    return EncodeOkResponse(req.id, R"({"stopping":true})");
  }
  return EncodeErrorResponse(req.id, ControlErrorCode::kFailedPrecondition,
                             "op '" + req.op + "' is not supported by this holdfastd");
}

}  // namespace holdfast
