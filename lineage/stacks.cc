#include "lineage/stacks.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

namespace holdfast {

namespace {

using json = nlohmann::json;

// "0-2,5": ranks sorted and unique.
std::string Ranges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string Seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), s < 10 ? "%.1f s" : "%.0f s", s);
  return b;
}

bool Contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

StackEvidence FoldStacks(const std::vector<RankStacks>& ranks, const StackLimits& limits) {
  using Key = std::tuple<std::string, bool, std::vector<std::string>>;
  std::map<Key, StackGroup> folded;
  StackEvidence out;
  for (const RankStacks& r : ranks) {
    for (const ThreadStack& t : r.threads) {
      std::vector<std::string> frames;
      for (size_t i = 0; i < t.frames.size() && i < limits.max_frames; ++i) {
        std::string f = t.frames[i];
        if (f.size() > limits.max_frame_chars) f = f.substr(0, limits.max_frame_chars - 3) + "...";
        frames.push_back(std::move(f));
      }
      const bool cut = t.cut || t.frames.size() > limits.max_frames;
      StackGroup& g = folded[Key{t.kind, t.main_thread, frames}];
      if (g.threads == 0) {
        g.kind = t.kind;
        g.main_thread = t.main_thread;
        g.frames = std::move(frames);
      }
      g.cut = g.cut || cut;
      ++g.threads;
      if (!Contains(g.ranks, r.rank)) g.ranks.push_back(r.rank);
    }
    for (const std::string& n : r.notes) out.notes.push_back(StackNote{r.rank, n});
  }
  std::vector<StackGroup> groups;
  for (auto& [key, g] : folded) {
    std::sort(g.ranks.begin(), g.ranks.end());
    groups.push_back(std::move(g));
  }
  // Main threads first; then the stacks most ranks share; then by their first rank.
  std::stable_sort(groups.begin(), groups.end(), [](const StackGroup& a, const StackGroup& b) {
    if (a.main_thread != b.main_thread) return a.main_thread;
    if (a.kind != b.kind) return a.kind < b.kind;
    if (a.ranks.size() != b.ranks.size()) return a.ranks.size() > b.ranks.size();
    return a.ranks.front() < b.ranks.front();
  });
  size_t bytes = 0;
  for (StackGroup& g : groups) {
    size_t size = 0;
    for (const std::string& f : g.frames) size += f.size();
    if (out.groups.size() >= limits.max_groups || bytes + size > limits.max_bytes) {
      out.dropped_threads += g.threads;
      continue;
    }
    bytes += size;
    out.groups.push_back(std::move(g));
  }
  std::stable_sort(out.notes.begin(), out.notes.end(),
                   [](const StackNote& a, const StackNote& b) { return a.rank < b.rank; });
  return out;
}

std::vector<std::string> RenderStacks(const StackEvidence& s, const std::vector<int>& culprits) {
  std::vector<std::string> lines;
  if (s.empty()) return lines;
  constexpr size_t kShownFrames = 12;
  lines.push_back("stacks    captured before the ranks were stopped, in " + Seconds(s.took_s) + " (limit " +
                  Seconds(s.limit_s) + "); innermost frame first");
  for (const char* kind : {"python", "native"}) {
    std::vector<const StackGroup*> mains;
    for (const StackGroup& g : s.groups) {
      if (g.main_thread && g.kind == kind) mains.push_back(&g);
    }
    if (mains.empty()) continue;
    lines.push_back(std::string("  ") + kind + ", main thread:");
    // The culprits' stacks first; the order is otherwise FoldStacks' (most ranks first).
    std::stable_sort(mains.begin(), mains.end(), [&](const StackGroup* a, const StackGroup* b) {
      auto blamed = [&](const StackGroup* g) {
        for (int r : g->ranks) {
          if (Contains(culprits, r)) return true;
        }
        return false;
      };
      return blamed(a) && !blamed(b);
    });
    size_t most = 0;
    for (const StackGroup* g : mains) most = std::max(most, g->ranks.size());
    for (const StackGroup* g : mains) {
      const size_t n = g->ranks.size();
      std::string head = "    " + std::to_string(n) + (n == 1 ? " rank (" : " ranks (") + Ranges(g->ranks) + ")";
      std::vector<int> named;
      for (int r : g->ranks) {
        if (Contains(culprits, r)) named.push_back(r);
      }
      if (!named.empty()) head += ", culprit";
      if (mains.size() > 1 && n < most) head += ", outlier";
      lines.push_back(head + ":");
      for (size_t i = 0; i < g->frames.size() && i < kShownFrames; ++i) lines.push_back("      " + g->frames[i]);
      const size_t more = g->frames.size() > kShownFrames ? g->frames.size() - kShownFrames : 0;
      if (more > 0 || g->cut) {
        lines.push_back("      ... " + (more > 0 ? std::to_string(more) + " more frames" : std::string("cut")) +
                        (g->cut ? " (deeper frames were not kept)" : ""));
      }
    }
  }
  size_t other_groups = 0;
  uint32_t other_threads = 0;
  for (const StackGroup& g : s.groups) {
    if (g.main_thread) continue;
    ++other_groups;
    other_threads += g.threads;
  }
  if (other_groups > 0) {
    lines.push_back("  other threads: " + std::to_string(other_threads) + " stacks, " + std::to_string(other_groups) +
                    " distinct (in the event's evidence: runctl lineage RUN --json)");
  }
  if (s.dropped_threads > 0) {
    lines.push_back("  " + std::to_string(s.dropped_threads) + " more stacks not kept (the evidence is bounded)");
  }
  for (const StackNote& n : s.notes) {
    lines.push_back(n.rank < 0 ? "  " + n.note : "  rank " + std::to_string(n.rank) + ": " + n.note);
  }
  return lines;
}

std::string StacksToJson(const StackEvidence& s) {
  json groups = json::array();
  for (const StackGroup& g : s.groups) {
    json o = {{"kind", g.kind}, {"main_thread", g.main_thread}, {"ranks", g.ranks}, {"threads", g.threads},
              {"frames", g.frames}};
    if (g.cut) o["cut"] = true;
    groups.push_back(std::move(o));
  }
  json notes = json::array();
  for (const StackNote& n : s.notes) notes.push_back({{"rank", n.rank}, {"note", n.note}});
  json j = {{"limit_s", s.limit_s}, {"took_s", s.took_s}, {"groups", std::move(groups)}, {"notes", std::move(notes)}};
  if (s.dropped_threads > 0) j["dropped_threads"] = s.dropped_threads;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

Status Wrong(const std::string& at, const char* expected) {
  return InvalidArgumentError("evidence: stacks" + at + ": expected " + expected);
}

// `v` at `key` of `o` when present and not null; nullptr otherwise.
const json* Key(const json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

Status ReadStrings(const json& o, const char* key, const std::string& at, std::vector<std::string>* out) {
  const json* v = Key(o, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) return Wrong(at + "." + key, "an array");
  for (const json& e : *v) {
    if (!e.is_string()) return Wrong(at + "." + key + "[]", "a string");
    out->push_back(e.get<std::string>());
  }
  return Status::Ok();
}

Result<StackGroup> ReadGroup(const json& o, const std::string& at) {
  if (!o.is_object()) return Wrong(at, "an object");
  StackGroup g;
  if (const json* v = Key(o, "kind")) {
    if (!v->is_string()) return Wrong(at + ".kind", "a string");
    g.kind = v->get<std::string>();
  }
  if (const json* v = Key(o, "main_thread")) {
    if (!v->is_boolean()) return Wrong(at + ".main_thread", "true or false");
    g.main_thread = v->get<bool>();
  }
  if (const json* v = Key(o, "cut")) {
    if (!v->is_boolean()) return Wrong(at + ".cut", "true or false");
    g.cut = v->get<bool>();
  }
  if (const json* v = Key(o, "threads")) {
    if (!v->is_number_unsigned()) return Wrong(at + ".threads", "a non-negative integer");
    g.threads = v->get<uint32_t>();
  }
  if (const json* v = Key(o, "ranks")) {
    if (!v->is_array()) return Wrong(at + ".ranks", "an array");
    for (const json& r : *v) {
      if (!r.is_number_integer()) return Wrong(at + ".ranks[]", "an integer");
      g.ranks.push_back(r.get<int>());
    }
  }
  HF_RETURN_IF_ERROR(ReadStrings(o, "frames", at, &g.frames));
  return g;
}

}  // namespace

Result<StackEvidence> ParseStacksJson(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Wrong("", "an object");
  StackEvidence s;
  for (auto [key, out] : {std::pair{"limit_s", &s.limit_s}, std::pair{"took_s", &s.took_s}}) {
    if (const json* v = Key(j, key)) {
      if (!v->is_number()) return Wrong(std::string(".") + key, "a number");
      *out = v->get<double>();
    }
  }
  if (const json* v = Key(j, "dropped_threads")) {
    if (!v->is_number_unsigned()) return Wrong(".dropped_threads", "a non-negative integer");
    s.dropped_threads = v->get<uint32_t>();
  }
  if (const json* v = Key(j, "groups")) {
    if (!v->is_array()) return Wrong(".groups", "an array");
    for (size_t i = 0; i < v->size(); ++i) {
      HF_ASSIGN_OR_RETURN(StackGroup g, ReadGroup((*v)[i], ".groups[" + std::to_string(i) + "]"));
      s.groups.push_back(std::move(g));
    }
  }
  if (const json* v = Key(j, "notes")) {
    if (!v->is_array()) return Wrong(".notes", "an array");
    for (const json& n : *v) {
      if (!n.is_object()) return Wrong(".notes[]", "an object");
      StackNote note;
      const json* r = Key(n, "rank");
      const json* t = Key(n, "note");
      if (r != nullptr && !r->is_number_integer()) return Wrong(".notes[].rank", "an integer");
      if (t != nullptr && !t->is_string()) return Wrong(".notes[].note", "a string");
      if (r != nullptr) note.rank = r->get<int>();
      if (t != nullptr) note.note = t->get<std::string>();
      s.notes.push_back(std::move(note));
    }
  }
  return s;
}

}  // namespace holdfast
