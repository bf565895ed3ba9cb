// PLACEHOLDER (being written): the CPU fused path.
#include "cpu/cpu.h"
#include "core/validate.h"
#include <thread>
namespace fsdpa::detail::cpu {
int default_num_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }
Verdict fused_supports(const Problem&, const Options&) { return Verdict::yes(); }
void fused_configure(const Problem& problem, Plan& plan) { reference_configure(problem, plan); }
void fused_launch(const Plan& plan, const Tensors& t, void* ws, void* s) { reference_launch(plan, t, ws, s); }
}
