// JobCheckpointReports: the checkpoint paths a job that is not holdfast-train
// reports (docs/job-contract.md, docs/progress-record.md "Checkpoint paths").
//
// A rank that committed a checkpoint appends one JSON line
//   {"step": 40, "path": "/abs/out/ckpt-00000040.pt", "rank": 0, "generation": 1}
// to RUN_DIR/job-checkpoints/rank-<R>.jsonl, then sets the progress record's
// checkpoint_step. The leading daemon reads what was appended since its last
// look (a line without its newline yet is left for the next one) and records
// the path with the commit once every rank's checkpoint_step reaches the step.
// One path per step: when several ranks report one, the lowest rank's newest
// line wins. Lines that do not parse are logged once and skipped: any job
// writes these files.
//
// Thread-safety: none; owned by the daemon's event-loop thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace holdfast {

// RUN_DIR/job-checkpoints: where ranks append their reports.
std::string JobCheckpointDir(const std::string& run_dir);

// Bytes of `path`: a file's size, or the sum of the regular files under a
// folder (symlinks not followed); 0 when it is missing.
int64_t PathBytes(const std::string& path);

class JobCheckpointReports {
 public:
  explicit JobCheckpointReports(std::string run_dir) : run_dir_(run_dir), dir_(JobCheckpointDir(run_dir)) {}

  // Reads every line appended since the last call. The first call reads the
  // files as they are (reports of earlier attempts: history); later calls'
  // lines are this daemon's (Fresh).
  void Refresh();
  // The path reported for `step` (nullopt: none); a relative one is taken
  // relative to the run directory.
  std::optional<std::string> PathOf(int64_t step) const;
  // Steps reported after the first Refresh, in (after, before), ascending.
  std::vector<int64_t> FreshSteps(int64_t after, int64_t before) const;
  // Every step reported (any time) later than `step`, ascending.
  std::vector<int64_t> StepsAfter(int64_t step) const;

 private:
  void ReadFile(const std::string& path, int rank);
  void Take(const std::string& line, int rank, const std::string& file);

  std::string run_dir_;
  std::string dir_;
  bool first_done_ = false;
  std::map<std::string, int64_t> offsets_;           // file -> bytes consumed (whole lines)
  std::map<int64_t, std::map<int, std::string>> paths_;  // step -> rank -> newest path
  std::set<int64_t> fresh_;                           // steps reported since the first Refresh
  std::set<std::string> warned_;                      // files with a bad line already logged
};

}  // namespace holdfast
