// ProgressSink: where a trainer-side process (holdfast-train's ranks, the
// rollout workers, the reward service) reports what it is doing, for its
// supervisor.
//
// The sink is never null: a process the supervisor gave a progress record
// (HOLDFAST_PROGRESS_PATH) reports into it through ProgressRecordSink; one
// without (a local run, a test) gets NoProgress(), which does nothing. So the
// code that reports (the training loop, the communicator wrapper that records
// collectives: trainer/comm/progress_communicator.h) never asks whether there
// is a record. The calls and their meaning are ProgressWriter's
// (common/progress_record.h); a sink adds nothing to the record.
//
// Thread-safety: as ProgressWriter's, one writer thread per sink (a record
// has exactly one writer). NoProgress() is stateless and may be shared by any
// number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/progress_record.h"
#include "common/status.h"

namespace holdfast {

class ProgressSink {
 public:
  virtual ~ProgressSink() = default;

  virtual void SetPhase(Phase phase) = 0;
  virtual void BeginStep() = 0;                 // phase kData, step timer starts
  virtual void EndStep(int64_t completed) = 0;  // step = completed
  // A collective was issued, on the group and with the messages `label`
  // says; returns its sequence number (0 without a record).
  virtual uint64_t IssueCollective(CollectiveKind kind, uint64_t bytes, const CollectiveLabel& label) = 0;
  // The rank's mesh (TP, PP, EP), once, before its first collective.
  virtual void SetMesh(int tensor, int pipeline, int expert) = 0;
  // The process blocks until collective `seq` is done (phase kCollective).
  virtual void WaitCollective(uint64_t seq, CollectiveKind kind) = 0;
  virtual void CollectiveDone(uint64_t seq) = 0;
  virtual void SetCheckpointStep(int64_t step) = 0;
  virtual void RecordCheckpointFailure(int64_t step, const std::string& message) = 0;
  // What the state was restored from (ProgressWriter::SetRestored), once,
  // before the first step.
  virtual void SetRestored(int64_t step, RestoreTier tier, uint32_t skipped) = 0;
};

// Reports into a rank's shared-memory progress record.
class ProgressRecordSink final : public ProgressSink {
 public:
  explicit ProgressRecordSink(std::unique_ptr<ProgressWriter> writer) : writer_(std::move(writer)) {}

  void SetPhase(Phase phase) override { writer_->SetPhase(phase); }
  void BeginStep() override { writer_->BeginStep(); }
  void EndStep(int64_t completed) override { writer_->EndStep(completed); }
  uint64_t IssueCollective(CollectiveKind kind, uint64_t bytes, const CollectiveLabel& label) override {
    return writer_->IssueCollective(kind, bytes, label);
  }
  void SetMesh(int tensor, int pipeline, int expert) override { writer_->SetMesh(tensor, pipeline, expert); }
  void WaitCollective(uint64_t seq, CollectiveKind kind) override { writer_->WaitCollective(seq, kind); }
  void CollectiveDone(uint64_t seq) override { writer_->CollectiveDone(seq); }
  void SetCheckpointStep(int64_t step) override { writer_->SetCheckpointStep(step); }
  void RecordCheckpointFailure(int64_t step, const std::string& message) override {
    writer_->RecordCheckpointFailure(step, message);
  }
  void SetRestored(int64_t step, RestoreTier tier, uint32_t skipped) override {
    writer_->SetRestored(step, tier, skipped);
  }

 private:
  const std::unique_ptr<ProgressWriter> writer_;  // never null
};

// The sink of a process without a record: every call does nothing.
class NoProgressSink final : public ProgressSink {
 public:
  void SetPhase(Phase) override {}
  void BeginStep() override {}
  void EndStep(int64_t) override {}
  uint64_t IssueCollective(CollectiveKind, uint64_t, const CollectiveLabel&) override { return 0; }
  void SetMesh(int, int, int) override {}
  void WaitCollective(uint64_t, CollectiveKind) override {}
  void CollectiveDone(uint64_t) override {}
  void SetCheckpointStep(int64_t) override {}
  void RecordCheckpointFailure(int64_t, const std::string&) override {}
  void SetRestored(int64_t, RestoreTier, uint32_t) override {}
};

// A process-wide NoProgressSink, for whoever has no record to report into.
ProgressSink& NoProgress();

// The sink for the record at `path` (normally HOLDFAST_PROGRESS_PATH, created
// by the supervisor) as `rank`: a ProgressRecordSink; an empty path gives a
// NoProgressSink. Fails only when a record was asked for and cannot be mapped.
Result<std::unique_ptr<ProgressSink>> OpenProgressSink(const std::string& path, int rank);

// OpenProgressSink of the path in HOLDFAST_PROGRESS_PATH (unset or empty: none).
Result<std::unique_ptr<ProgressSink>> OpenProgressSinkFromEnv(int rank);

}  // namespace holdfast
