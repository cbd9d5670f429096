// Runs one request through an engine that has nothing else to do and returns its token events.
#pragma once

#include <vector>

#include "engine/engine.h"

namespace m3::testing {

inline std::vector<TokenEvent> run_alone(Engine& e, const Request& r) {
  e.add(r);
  std::vector<TokenEvent> out;
  while (e.has_work())
    for (TokenEvent& ev : e.step()) out.push_back(std::move(ev));
  return out;
}

}  // namespace m3::testing
