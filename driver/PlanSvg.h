// The memory plan of a compiled library as a picture (sgc inspect LIB.so
// --plan-svg FILE): the arena's bytes upward, the step's schedule left to
// right, each tensor a bar from its first write to its last read at its
// place in the arena, coloured by region. What holds the peak, and what
// --recompute changes, can be seen at a glance; hovering a bar names it.
#pragma once
#include "runtime/Program.h"

#include <string>

namespace sgc::driver {

/// The SVG text of `p`'s plan, titled `title`. Deterministic: the same program, the same bytes.
std::string planSvg(const rt::Program& p, const std::string& title);

} // namespace sgc::driver
