#include "common/program_cli.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include <spdlog/spdlog.h>

#include "common/build_info.h"

namespace holdfast {

std::string VersionText(std::string_view program, unsigned built_against) {
  const BuildInfo& b = GetBuildInfo();
  std::string text = std::string(program) + " " + b.version + "\ncommit " + b.commit;
  std::vector<std::string> libs;
  auto add = [&](unsigned bit, const char* name, const std::string& version) {
    if ((built_against & bit) != 0 && !version.empty()) libs.push_back(std::string(name) + " " + version);
  };
  add(kBuiltAgainstLibTorch, "LibTorch", b.libtorch);
  add(kBuiltAgainstSlurm, "Slurm", b.slurm);
  add(kBuiltAgainstCuda, "CUDA", b.cuda);
  add(kBuiltAgainstNccl, "NCCL", b.nccl);
  if (!libs.empty()) {
    text += "\nbuilt against:";
    for (size_t i = 0; i < libs.size(); ++i) text += (i == 0 ? " " : ", ") + libs[i];
  }
  return text;
}

std::string ExitCodesHelp(const std::vector<std::pair<int, std::string>>& codes) {
  std::string text = "Exit codes:\n";
  for (const auto& [code, meaning] : codes) {
    char num[16];
    std::snprintf(num, sizeof num, "  %-4d", code);
    text += num + meaning + "\n";
  }
  return text;
}

void AddProgramConventions(CLI::App& app, std::string_view program, unsigned built_against,
                           const std::string& exit_codes_help) {
  app.set_version_flag("--version", VersionText(program, built_against),
                       "print the version, the git commit and the libraries built against, and exit");
  const std::string footer = app.get_footer();
  app.footer(footer.empty() ? "\n" + exit_codes_help : footer + "\n\n" + exit_codes_help);
}

namespace {

// Edit distance with adjacent transpositions ("statsu" is one edit from "status").
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string Dashed(const std::string& name, bool is_long) { return (is_long ? "--" : "-") + name; }

// The option `token` ("--name", "--name=v", "-c") names in `app` or a parent it falls through to.
const CLI::Option* FindFlag(const CLI::App* app, const std::string& token) {
  const bool is_long = token.rfind("--", 0) == 0;
  std::string name = token.substr(is_long ? 2 : 1);
  if (is_long) name = name.substr(0, name.find('='));
  else name = name.substr(0, 1);
  for (const CLI::App* a = app; a != nullptr; a = a->get_fallthrough() ? a->get_parent() : nullptr) {
    for (const CLI::Option* opt : a->get_options()) {
      const auto& names = is_long ? opt->get_lnames() : opt->get_snames();
      if (std::find(names.begin(), names.end(), name) != names.end()) return opt;
    }
  }
  return nullptr;
}

std::vector<std::string> SubcommandNames(CLI::App* app) {
  std::vector<std::string> names;
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
    for (const std::string& alias : sub->get_aliases()) names.push_back(alias);
  }
  return names;
}

std::string DidYouMean(const std::string& suggestion) {
  return suggestion.empty() ? std::string() : "; did you mean '" + suggestion + "'?";
}

}  // namespace

std::string ClosestName(std::string_view word, const std::vector<std::string>& candidates) {
  const size_t bare = word.size() - std::min(word.size(), word.find_first_not_of('-'));
  const size_t limit = std::clamp<size_t>(bare / 3, 1, 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    size_t d = EditDistance(word, c);
    // A unique-looking abbreviation ("stat", "--run") is as good as one typo.
    if (word.size() >= 3 && c.size() > word.size() && c.compare(0, word.size(), word) == 0) d = std::min<size_t>(d, 1);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::vector<std::string> FlagNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* a = &app; a != nullptr; a = a->get_fallthrough() ? a->get_parent() : nullptr) {
    for (const CLI::Option* opt : a->get_options()) {
      if (opt->get_group().empty()) continue;  // hidden: an old spelling kept for scripts
      for (const std::string& n : opt->get_lnames()) names.push_back(Dashed(n, true));
      for (const std::string& n : opt->get_snames()) names.push_back(Dashed(n, false));
    }
  }
  return names;
}

std::string UnknownArgumentMessage(CLI::App& app, std::string_view program, int argc, const char* const* argv) {
  CLI::App* cur = &app;
  size_t positionals_taken = 0;
  auto who = [&] { return std::string(program) + (cur == &app ? "" : " " + cur->get_name()); };
  for (int i = 1; i < argc; ++i) {
    const std::string token = argv[i];
    if (token == "--") break;
    if (token.size() > 1 && token[0] == '-') {
      const CLI::Option* opt = FindFlag(cur, token);
      if (opt == nullptr) {
        const std::string name = token.substr(0, token.find('='));
        return who() + ": unknown flag '" + name + "'" + DidYouMean(ClosestName(name, FlagNames(*cur)));
      }
      const bool inline_value = token.find('=') != std::string::npos || (token[1] != '-' && token.size() > 2);
      if (opt->get_items_expected_max() > 0 && !inline_value) ++i;  // its value (flags take none)
      continue;
    }
    if (cur->get_prefix_command()) return "";  // the rest is a command of its own (holdfastd's job)
    bool descended = false;
    for (CLI::App* sub : cur->get_subcommands([](CLI::App*) { return true; })) {
      if (sub->check_name(token)) {
        cur = sub;
        positionals_taken = 0;
        descended = true;
        break;
      }
    }
    if (descended) continue;
    size_t capacity = 0;
    for (const CLI::Option* opt : cur->get_options()) {
      if (opt->get_positional()) capacity += static_cast<size_t>(std::max(opt->get_items_expected_max(), 0));
    }
    if (positionals_taken < capacity) {
      ++positionals_taken;
      continue;
    }
    const std::vector<std::string> commands = SubcommandNames(cur);
    if (!commands.empty()) {
      return who() + ": unknown command '" + token + "'" + DidYouMean(ClosestName(token, commands));
    }
    return who() + ": unexpected argument '" + token + "'";
  }
  return "";
}

int HandleParseError(CLI::App& app, const CLI::ParseError& e, std::string_view program, int argc,
                     const char* const* argv, int usage_exit_code) {
  if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version: printed on stdout
  std::string message = UnknownArgumentMessage(app, program, argc, argv);
  if (message.empty()) message = std::string(program) + ": " + e.what();
  const bool has_commands = !SubcommandNames(&app).empty();
  std::cerr << message << "\nRun '" << program << " --help' for the " << (has_commands ? "commands and " : "")
            << "flags.\n";
  return usage_exit_code;
}

std::string UtcLogPattern(std::string_view tag) {
  return std::string(kUtcLogTime) + " [" + std::string(tag) + "] [%^%l%$] %v";
}

void UseUtcLogPattern(std::string_view tag) { spdlog::set_pattern(UtcLogPattern(tag), spdlog::pattern_time_type::utc); }

}  // namespace holdfast
