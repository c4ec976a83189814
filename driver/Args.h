// A small command-line parser for the sgc subcommands: --name value,
// --name=value, flags, positional arguments, and a generated --help.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sgc::driver {

struct OptionSpec {
  std::string name;    ///< without dashes; "o" becomes -o
  std::string valueName; ///< empty for a flag
  std::string help;
};

struct CommandSpec {
  std::string name, usage, summary;
  std::vector<OptionSpec> options;
};

class Args {
public:
  /// Parses argv (after the subcommand). Returns nullopt and prints an error
  /// (or the help text, setting `helpShown`) when parsing stops.
  static std::optional<Args> parse(const CommandSpec& spec, int argc, char** argv, bool& helpShown);

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string get(const std::string& name, const std::string& def = "") const;
  /// Every value given to a repeatable option, in order (get() gives the last).
  std::vector<std::string> getAll(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

private:
  std::map<std::string, std::string> values_;
  std::vector<std::pair<std::string, std::string>> all_;
  std::vector<std::string> positional_;
};

void printHelp(const CommandSpec& spec);

} // namespace sgc::driver
