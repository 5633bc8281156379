#include "trainer/rl/replay_buffer.h"

#include <utility>

#include <nlohmann/json.hpp>

namespace holdfast::rl {

const char* ReplayBuffer::VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kAccepted: return "accepted";
    case Verdict::kDuplicate: return "duplicate";
    case Verdict::kConsumed: return "already trained on";
    case Verdict::kNotAsked: return "not asked for";
    case Verdict::kFromALostTimeline: return "from a lost timeline";
    case Verdict::kTooStale: return "too stale";
    case Verdict::kMalformed: return "malformed";
  }
  return "?";
}

ReplayBuffer::ReplayBuffer(int64_t prompts_per_step, int64_t group_size, int64_t max_staleness, std::string task)
    : prompts_per_step_(prompts_per_step), group_size_(group_size), max_staleness_(max_staleness),
      task_(std::move(task)) {}

ReplayBuffer::Verdict ReplayBuffer::Offer(RolloutGroup group, int64_t learner_version, uint64_t upto,
                                          std::string* why) {
  const uint64_t q = group.q;
  const std::string name = "group q=" + std::to_string(q) + " (version " + std::to_string(group.version) +
                           ", worker " + std::to_string(group.worker) + ")";
  if (q < consumed_below_) {
    *why = name + ": prompts below " + std::to_string(consumed_below_) + " were trained on already";
    return Verdict::kConsumed;
  }
  if (groups_.count(q) != 0) {
    *why = name + ": the buffer holds this prompt already";
    return Verdict::kDuplicate;
  }
  // Before 'not asked': such a group is dropped whenever it is seen, never kept for later.
  if (group.version > learner_version) {
    *why = name + ": the learner is at version " + std::to_string(learner_version) +
           " (it resumed from an earlier checkpoint; that policy no longer exists)";
    return Verdict::kFromALostTimeline;
  }
  if (q >= upto) {
    *why = name + ": only prompts below " + std::to_string(upto) + " are asked for";
    return Verdict::kNotAsked;
  }
  if (group.task != task_ || static_cast<int64_t>(group.samples.size()) != group_size_) {
    *why = name + ": made for task '" + group.task + "' with " + std::to_string(group.samples.size()) +
           " samples; this run is task '" + task_ + "' with groups of " + std::to_string(group_size_);
    return Verdict::kMalformed;
  }
  const int64_t staleness = StepOfPrompt(q, prompts_per_step_) - group.version;
  if (staleness > max_staleness_) {
    *why = name + ": " + std::to_string(staleness) + " steps stale, the bound is " + std::to_string(max_staleness_);
    return Verdict::kTooStale;
  }
  groups_.emplace(q, std::move(group));
  return Verdict::kAccepted;
}

bool ReplayBuffer::HasStep(int64_t step) const { return Missing(step).empty(); }

std::vector<uint64_t> ReplayBuffer::Missing(int64_t step) const {
  std::vector<uint64_t> out;
  const uint64_t first = static_cast<uint64_t>(step * prompts_per_step_);
  for (uint64_t q = first; q < first + static_cast<uint64_t>(prompts_per_step_); ++q) {
    if (groups_.count(q) == 0) out.push_back(q);
  }
  return out;
}

std::vector<RolloutGroup> ReplayBuffer::TakeStep(int64_t step) {
  std::vector<RolloutGroup> out;
  const uint64_t first = static_cast<uint64_t>(step * prompts_per_step_);
  const uint64_t end = first + static_cast<uint64_t>(prompts_per_step_);
  for (uint64_t q = first; q < end; ++q) {
    auto it = groups_.find(q);
    HF_CHECK_MSG(it != groups_.end(), "TakeStep without HasStep");
    out.push_back(std::move(it->second));
    groups_.erase(it);
  }
  SetConsumedBelow(end);
  return out;
}

void ReplayBuffer::SetConsumedBelow(uint64_t q) {
  consumed_below_ = q;
  groups_.erase(groups_.begin(), groups_.lower_bound(q));
}

std::set<uint64_t> ReplayBuffer::buffered() const {
  std::set<uint64_t> out;
  for (const auto& [q, g] : groups_) out.insert(q);
  return out;
}

std::string ReplayBuffer::Serialize() const {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& [q, g] : groups_) groups.push_back(nlohmann::json::parse(GroupToJson(g)));
  nlohmann::json j = {{"format", "holdfast-rl-buffer-v1"},
                      {"prompts_per_step", prompts_per_step_},
                      {"group_size", group_size_},
                      {"task", task_},
                      {"consumed_below", consumed_below_},
                      {"groups", groups}};
  return j.dump();
}

Status ReplayBuffer::Restore(const std::string& text, const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != "holdfast-rl-buffer-v1") {
    return CorruptionError(source + ": the replay buffer is not a holdfast-rl-buffer-v1 JSON object");
  }
  try {
    const int64_t p = j.at("prompts_per_step").get<int64_t>();
    const int64_t g = j.at("group_size").get<int64_t>();
    const std::string task = j.at("task").get<std::string>();
    if (p != prompts_per_step_ || g != group_size_ || task != task_) {
      return FailedPreconditionError(source + ": the replay buffer was saved with rl.prompts_per_step " +
                                     std::to_string(p) + ", rl.group_size " + std::to_string(g) + ", task '" + task +
                                     "'; this run has " + std::to_string(prompts_per_step_) + ", " +
                                     std::to_string(group_size_) + ", '" + task_ +
                                     "': resume with the settings it was saved with");
    }
    std::map<uint64_t, RolloutGroup> groups;
    for (const auto& gj : j.at("groups")) {
      HF_ASSIGN_OR_RETURN(RolloutGroup group, GroupFromJson(gj.dump(), source));
      const uint64_t q = group.q;
      groups.emplace(q, std::move(group));
    }
    consumed_below_ = j.at("consumed_below").get<uint64_t>();
    groups_ = std::move(groups);
  } catch (const nlohmann::json::exception& e) {
    return CorruptionError(source + ": the replay buffer is malformed: " + e.what());
  }
  return Status::Ok();
}

}  // namespace holdfast::rl
