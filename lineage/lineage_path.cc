#include "lineage/lineage_path.h"

#include <sqlite3.h>

#include <cstring>

namespace holdfast {

size_t MaxLineageDbPathBytes() {
  const sqlite3_vfs* vfs = sqlite3_vfs_find(nullptr);
  const int max_pathname = vfs != nullptr ? vfs->mxPathname : 512;
  return static_cast<size_t>(max_pathname) - std::strlen("-journal");
}

}  // namespace holdfast
