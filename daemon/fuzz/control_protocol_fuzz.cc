// libFuzzer target: the control protocol's parsers must reject any line
// cleanly (no crash, no throw), and whatever they accept must re-encode to a
// line that parses back to the same message.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/control_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view line(reinterpret_cast<const char*>(data), size);

  holdfast::Result<holdfast::ControlRequest> req = holdfast::ParseControlRequest(line);
  if (req.ok()) {
    std::string encoded = holdfast::EncodeRequest(*req);
    // Re-encoding may grow a line near the limit ("1e5" dumps as "100000.0").
    if (encoded.size() > holdfast::kMaxControlMessageBytes) return 0;
    holdfast::Result<holdfast::ControlRequest> again = holdfast::ParseControlRequest(encoded);
    HF_CHECK(again.ok());
    HF_CHECK(again->id == req->id && again->op == req->op && again->args_json == req->args_json);
  }

  holdfast::Result<holdfast::ControlResponse> resp = holdfast::ParseControlResponse(line);
  if (resp.ok()) {
    std::string encoded = resp->ok ? holdfast::EncodeOkResponse(resp->id, resp->result_json)
                                   : holdfast::EncodeErrorResponse(resp->id, resp->error);
    if (encoded.size() > holdfast::kMaxControlMessageBytes) return 0;
    holdfast::Result<holdfast::ControlResponse> again = holdfast::ParseControlResponse(encoded);
    HF_CHECK(again.ok());
    HF_CHECK(again->id == resp->id && again->ok == resp->ok);
    if (resp->ok) {
      HF_CHECK(again->result_json == resp->result_json);
      holdfast::Result<holdfast::RunStatus> status = holdfast::ParseStatusResult(resp->result_json);
      if (status.ok()) {
        std::string re = holdfast::EncodeStatusResult(*status);
        holdfast::Result<holdfast::RunStatus> status2 = holdfast::ParseStatusResult(re);
        HF_CHECK(status2.ok());
        HF_CHECK(holdfast::EncodeStatusResult(*status2) == re);
      }
    }
  }
  return 0;
}
