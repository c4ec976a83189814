// The command-line parser.
#include "driver/Args.h"

#include <cstdio>

namespace sgc::driver {

std::string Args::get(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

std::vector<std::string> Args::getAll(const std::string& name) const {
  std::vector<std::string> r;
  for (auto& [n, v] : all_)
    if (n == name) r.push_back(v);
  return r;
}

void printHelp(const CommandSpec& spec) {
  printf("usage: %s\n\n%s\n", spec.usage.c_str(), spec.summary.c_str());
  if (spec.options.empty()) return;
  printf("\noptions:\n");
  for (const auto& o : spec.options) {
    std::string flag = (o.name.size() == 1 ? "-" : "--") + o.name + (o.valueName.empty() ? "" : " " + o.valueName);
    std::string help; // continuation lines under the first one's text
    for (char c : o.help) help += c == '\n' ? std::string("\n") + std::string(31, ' ') : std::string(1, c);
    printf("  %-28s %s\n", flag.c_str(), help.c_str());
  }
  printf("  %-28s %s\n", "--help", "show this help");
}

std::optional<Args> Args::parse(const CommandSpec& spec, int argc, char** argv, bool& helpShown) {
  Args a;
  helpShown = false;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      printHelp(spec);
      helpShown = true;
      return std::nullopt;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      a.positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(arg[1] == '-' ? 2 : 1), value;
    bool inlineValue = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inlineValue = true;
    }
    const OptionSpec* o = nullptr;
    for (const auto& s : spec.options)
      if (s.name == name) o = &s;
    if (!o) {
      fprintf(stderr, "sgc %s: unknown option '%s' (see sgc %s --help)\n", spec.name.c_str(), arg.c_str(), spec.name.c_str());
      return std::nullopt;
    }
    if (!o->valueName.empty() && !inlineValue) {
      if (i + 1 >= argc) {
        fprintf(stderr, "sgc %s: option '%s' needs a value %s\n", spec.name.c_str(), arg.c_str(), o->valueName.c_str());
        return std::nullopt;
      }
      value = argv[++i];
    } else if (o->valueName.empty() && inlineValue) {
      fprintf(stderr, "sgc %s: option '--%s' takes no value\n", spec.name.c_str(), name.c_str());
      return std::nullopt;
    }
    a.values_[name] = value;
    a.all_.emplace_back(name, value);
  }
  return a;
}

} // namespace sgc::driver
