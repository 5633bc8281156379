#include "cli/daemon_client.h"

#include <nlohmann/json.hpp>

#include "daemon/munge_credential.h"

namespace holdfast {

namespace {

using json = nlohmann::json;

json ParseObject(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json::object();
}

// The reply of one exchange, turned into a Reply of T by `read` (the answer's
// result object -> T).
template <typename T, typename Read>
Reply<T> Typed(const Reply<std::string>& raw, Read read) {
  if (raw.ok()) return Reply<T>::Answer(read(*raw));
  if (raw.refused()) return Reply<T>::Refused(raw.refusal_code(), raw.status());
  return Reply<T>::Failed(raw.status());
}


}  // namespace

std::string RunIdArgs(const std::string& run_id) {
  return run_id.empty() ? "{}" : json({{"run_id", run_id}}).dump();
}

DaemonClient::DaemonClient(const std::string& run_dir, std::chrono::milliseconds timeout, ControlVia via)
    : run_dir_(run_dir), socket_path_(ControlSocketPath(run_dir)), timeout_(timeout), via_(via),
      munge_socket_(MungeSocket()) {}

Reply<std::string> DaemonClient::Call(const std::string& op, const std::string& args_json,
                                      std::chrono::milliseconds timeout) const {
  ControlRequest req;
  req.id = next_id_.fetch_add(1);
  req.op = op;
  req.args_json = args_json;
  Result<ControlResponse> resp = CallRunDaemon(run_dir_, req, timeout, via_, munge_socket_);
  if (!resp.ok()) return Reply<std::string>::Failed(resp.status());
  if (!resp->ok) return Reply<std::string>::Refused(resp->error_code, resp->error);
  return Reply<std::string>::Answer(resp->result_json);
}

Reply<PingAnswer> DaemonClient::Ping(std::optional<std::chrono::milliseconds> timeout) const {
  return Typed<PingAnswer>(Call(control_op::kPing, "{}", timeout.value_or(timeout_)),
                           [](const std::string& r) { return PingAnswer{r}; });
}

Reply<StatusAnswer> DaemonClient::GetStatus() const {
  return Typed<StatusAnswer>(Call(control_op::kStatus, "{}", timeout_), [](const std::string& r) {
    StatusAnswer a;
    a.result_json = r;
    const json j = ParseObject(r);
    if (j.value("run_id", json()).is_string()) a.run_id = j["run_id"].get<std::string>();
    a.status = ParseStatusResult(r);
    return a;
  });
}

Reply<CheckpointAnswer> DaemonClient::Checkpoint(const std::string& run_id) const {
  return Typed<CheckpointAnswer>(Call(control_op::kCheckpoint, RunIdArgs(run_id), timeout_),
                                 [](const std::string& r) {
                                   CheckpointAnswer a;
                                   a.result_json = r;
                                   const json j = ParseObject(r);
                                   if (j.value("requested_at_step", json()).is_number()) {
                                     a.requested_at_step = j["requested_at_step"].get<int64_t>();
                                   }
                                   return a;
                                 });
}

Reply<StopAnswer> DaemonClient::Stop(const std::string& run_id) const {
  return Typed<StopAnswer>(Call(control_op::kStop, RunIdArgs(run_id), timeout_),
                           [](const std::string& r) { return StopAnswer{r}; });
}

Result<std::string> DaemonClient::SendLine(const std::string& line) const {
  return SendControlLine(socket_path_, line, timeout_);
}

}  // namespace holdfast
