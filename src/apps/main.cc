// The `m3` command-line entry point: subcommands (generate, ...) and uniform error reporting — a bad flag,
// file or tensor ends the program with one line naming it and a non-zero status, never a crash.
#include <iostream>

#include <CLI/CLI.hpp>

#include "apps/bench_command.h"
#include "apps/generate_command.h"
#include "apps/random_model_command.h"
#include "apps/serve_command.h"
#include "apps/tokenize_command.h"
#include "common/error.h"
#include "common/log.h"
#include "dist/launch.h"

int main(int argc, char** argv) {
  m3::dist::set_command_line(argc, argv);  // self-spawned ranks re-run it
  CLI::App app{"m3serve: inference server for the MiniMax-M3 model family", "m3"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "m3serve 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug | info | warn | error | off")->envname("M3_LOG_LEVEL");
  std::string log_format = "text";
  app.add_option("--log-format", log_format, "text | json (one JSON object per line)")
      ->envname("M3_LOG_FORMAT");
  int exit_code = 0;
  m3::register_generate_command(app, exit_code);
  m3::register_serve_command(app, exit_code);
  m3::register_random_model_command(app, exit_code);
  m3::register_tokenize_commands(app, exit_code);
  m3::register_bench_command(app, exit_code);
  app.parse_complete_callback([&] {
    m3::set_log_level(m3::parse_log_level(log_level));
    m3::set_log_format(m3::parse_log_format(log_format));
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const m3::Error& e) {
    std::cerr << "m3: error: " << e.what() << "\n";
    return e.kind() == m3::ErrorKind::kInternal ? 70 : 2;
  } catch (const std::exception& e) {
    std::cerr << "m3: internal error: " << e.what() << "\n";
    return 70;
  }
  return exit_code;
}
