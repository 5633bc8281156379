#include "lineage/event_kind.h"

namespace holdfast {

const EventKindInfo* FindEventKind(std::string_view kind) {
  for (const EventKindInfo& e : kEventKinds) {
    if (kind == e.kind) return &e;
  }
  return nullptr;
}

bool IsIncidentKind(std::string_view kind) {
  const EventKindInfo* e = FindEventKind(kind);
  return e != nullptr && e->is_incident;
}

bool CountsAgainstHost(std::string_view kind) {
  const EventKindInfo* e = FindEventKind(kind);
  return e != nullptr && e->counts_against_host;
}

const char* RunbookFor(std::string_view kind) {
  const EventKindInfo* e = FindEventKind(kind);
  return e != nullptr ? e->runbook : "";
}

}  // namespace holdfast
