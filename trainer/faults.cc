#include "trainer/faults.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

namespace holdfast {
namespace {

bool ParseInt(const std::string& text, int64_t lo, int64_t hi, int64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// "xF" with F from 1 to 1000.
bool ParseFactor(const std::string& text, double* out) {
  char* end = nullptr;
  const double v = text.size() > 1 && text[0] == 'x' ? std::strtod(text.c_str() + 1, &end) : 0;
  if (end == nullptr || *end != '\0' || !(v >= 1 && v <= 1000)) return false;
  *out = v;
  return true;
}

}  // namespace

Result<Fault> ParseFault(const std::string& text, const std::string& out_dir) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("--inject-fault '" + text + "': " + why);
  };
  Fault f;
  const size_t at = text.find('@'), colon = text.find(':', at == std::string::npos ? 0 : at);
  if (at == std::string::npos || colon == std::string::npos) {
    return bad("expected KIND@RANK:STEP, e.g. hang@1:12 (slow also takes :xF, e.g. slow@2:10:x4)");
  }
  f.kind = text.substr(0, at);
  if (f.kind != "hang" && f.kind != "crash" && f.kind != "slow" && f.kind != "exit" && f.kind != "stop") {
    return bad("KIND must be hang, crash, exit, stop or slow");
  }
  int64_t rank = 0;
  if (!ParseInt(text.substr(at + 1, colon - at - 1), 0, 1 << 20, &rank)) return bad("RANK must be a rank number");
  f.rank = static_cast<int>(rank);
  std::string step = text.substr(colon + 1);
  const size_t factor_colon = step.find(':');
  if (factor_colon != std::string::npos) {
    const std::string factor = step.substr(factor_colon + 1);
    step.resize(factor_colon);
    if (f.kind != "slow") return bad("only slow takes a factor (:xF)");
    if (!ParseFactor(factor, &f.factor)) return bad("the factor must read xF with F from 1 to 1000, e.g. x4");
  }
  if (!ParseInt(step, 1, INT64_MAX, &f.step)) return bad("STEP must be a step number (1 or more)");
  f.marker =
      out_dir + "/fault-" + f.kind + "-rank" + std::to_string(f.rank) + "-step" + std::to_string(f.step) + ".fired";
  return f;
}

bool ClaimFault(const Fault& f) {
  if (std::filesystem::exists(f.marker)) return false;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(f.marker).parent_path(), ec);
  std::ofstream marker(f.marker);
  marker << "fired\n";
  marker.close();
  if (!marker) {
    spdlog::error("cannot write the fault marker {}: not injecting (it would fire in every generation)", f.marker);
    return false;
  }
  return true;
}

Result<Fault> ParseDrill(const std::string& text) {
  std::istringstream in(text);
  Fault f;
  std::string factor, steps, extra;
  in >> f.kind >> factor >> steps >> extra;
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("drill '" + text + "': " + why + " (expected 'hang', 'crash' or 'slow xF N')");
  };
  if (f.kind == "hang" || f.kind == "crash") {
    if (!factor.empty()) return bad(f.kind + " takes nothing more");
    return f;
  }
  if (f.kind != "slow") return bad("unknown fault '" + f.kind + "'");
  if (!extra.empty()) return bad("too many words");
  if (!ParseFactor(factor, &f.factor)) return bad("the factor must read xF with F from 1 to 1000, e.g. x4");
  if (!ParseInt(steps, 0, INT64_MAX, &f.slow_steps)) return bad("N must be a number of steps (0: no end)");
  return f;
}

std::optional<Fault> TakeDrill(const std::string& dir, int rank, int64_t next_step) {
  const std::string path = dir + "/rank-" + std::to_string(rank);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  const std::string taken = path + ".taken-" + std::to_string(next_step);
  std::filesystem::rename(path, taken, ec);
  if (ec) {
    spdlog::error("drill {}: cannot take it ({}); ignored", path, ec.message());
    return std::nullopt;
  }
  std::ifstream in(taken);
  std::stringstream text;
  text << in.rdbuf();
  auto f = ParseDrill(text.str());
  if (!f.ok()) {
    spdlog::error("{}; ignored", f.status().message());
    return std::nullopt;
  }
  f->rank = rank;
  f->step = next_step;
  return *f;
}

void FireHangOrCrash(const Fault& f, int rank, int64_t next_step) {
  if (f.kind == "slow") return;
  spdlog::warn("FAULT INJECTED: {} on rank {} at step {}", f.kind, rank, next_step);
  if (f.kind == "crash") std::abort();
  if (f.kind == "exit") {  // the job's own failure: exit 1, as a Python job's uncaught exception does
    spdlog::default_logger()->flush();
    std::_Exit(1);
  }
  if (f.kind == "stop") {  // job-control stop, as SIGSTOP from outside: every thread stops here
    spdlog::default_logger()->flush();
    kill(getpid(), SIGSTOP);
    return;  // continued (SIGCONT): the step goes on
  }
  // A hang in compute: busy, never entering the next collective.
  volatile double x = 1.0;
  for (;;) x = x * 1.0000001 + 1e-9;
}

void Slowdown::Start(const Fault& f, int rank, int64_t first_step) {
  active = true;
  factor = f.factor;
  until_step = f.slow_steps > 0 ? first_step + f.slow_steps - 1 : 0;
  if (until_step > 0) {
    spdlog::warn("FAULT INJECTED: slow x{} on rank {} from step {} to step {} (compute {} times as long)", factor,
                 rank, first_step, until_step, factor);
  } else {
    spdlog::warn("FAULT INJECTED: slow x{} on rank {} from step {} on (compute {} times as long)", factor, rank,
                 first_step, factor);
  }
}

void Slowdown::BeforeStep(int64_t next_step) {
  if (active && until_step > 0 && next_step > until_step) {
    active = false;
    spdlog::warn("injected slowdown over: step {} computes at full speed again", next_step);
  }
  sleep_ms = active ? (factor - 1) * last_compute_ms : 0;
  slept_ms = 0;
}

void Slowdown::AfterStep(double step_ms, double comm_wait_ms) {
  last_compute_ms = step_ms - comm_wait_ms - slept_ms;
  if (last_compute_ms < 0) last_compute_ms = 0;
}

namespace {

class NoFaults final : public FaultHook {
 public:
  void BeforeStep(int64_t) override {}
  void BeforeUpdate() override {}
  void AfterStep(double, double) override {}
};

// --inject-fault and --drill-dir.
class InjectedFaults final : public FaultHook {
 public:
  InjectedFaults(const FaultOptions& options, std::optional<Fault> fault)
      : rank_(options.rank), drill_dir_(options.drill_dir), sleep_(options.sleep), fault_(std::move(fault)),
        slow_here_(fault_ && fault_->kind == "slow" && fault_->rank == rank_) {
    if (!sleep_) {
      sleep_ = [](double ms) { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); };
    }
  }

  void BeforeStep(int64_t next_step) override {
    if (fault_ && fault_->kind != "slow" && fault_->rank == rank_ && fault_->step == next_step &&
        (fault_->kind == "exit" || ClaimFault(*fault_))) {  // exit: every time (the job fails there wherever it runs)
      FireHangOrCrash(*fault_, rank_, next_step);
    }
    if (slow_here_ && !slow_claimed_ && next_step >= fault_->step) {
      slow_claimed_ = true;
      if (ClaimFault(*fault_)) slow_.Start(*fault_, rank_, next_step);
    }
    if (!drill_dir_.empty()) {
      if (std::optional<Fault> drill = TakeDrill(drill_dir_, rank_, next_step)) {
        FireHangOrCrash(*drill, rank_, next_step);
        slow_.Start(*drill, rank_, next_step);
      }
    }
    slow_.BeforeStep(next_step);
  }

  void BeforeUpdate() override {
    if (slow_.active && slow_.sleep_ms > 0) {
      sleep_(slow_.sleep_ms);
      slow_.slept_ms = slow_.sleep_ms;
    }
  }

  void AfterStep(double step_ms, double comm_wait_ms) override { slow_.AfterStep(step_ms, comm_wait_ms); }

 private:
  const int rank_;
  const std::string drill_dir_;
  std::function<void(double)> sleep_;
  const std::optional<Fault> fault_;  // --inject-fault's, for any rank
  const bool slow_here_;              // fault_ is a slowdown of this rank
  bool slow_claimed_ = false;         // its marker was looked at (it fires once per run)
  Slowdown slow_;
};

}  // namespace

Result<std::unique_ptr<FaultHook>> MakeFaultHook(const FaultOptions& options) {
  if (options.inject_fault.empty() && options.drill_dir.empty()) {
    return std::unique_ptr<FaultHook>(std::make_unique<NoFaults>());
  }
  std::optional<Fault> fault;
  if (!options.inject_fault.empty()) {
    HF_ASSIGN_OR_RETURN(fault, ParseFault(options.inject_fault, options.out_dir));
  }
  return std::unique_ptr<FaultHook>(std::make_unique<InjectedFaults>(options, std::move(fault)));
}

}  // namespace holdfast
