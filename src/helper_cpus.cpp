// HelperCpus: JitOptions::helper_cpus as a CPU mask, put on helpers as they
// start (helper_cpus.hpp says why it is the operator's to name).
#include "helper_cpus.hpp"

#include <threechains/error.hpp>

#include <string>

namespace threechains::detail {

HelperCpus::HelperCpus(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      throw Error(errc::invalid_argument, "JitOptions::helper_cpus: CPU " + std::to_string(cpu) +
                                              " is not a CPU id (0.." +
                                              std::to_string(CPU_SETSIZE - 1) + ")");
    }
    CPU_SET(cpu, &set);
  }
  cpus_ = set;
}

bool HelperCpus::place(pid_t task) const noexcept {
  return cpus_ && sched_setaffinity(task, sizeof(*cpus_), &*cpus_) == 0;
}

void leave_real_time(pid_t task) noexcept {
  const int policy = sched_getscheduler(task);
  if (policy != SCHED_FIFO && policy != SCHED_RR) return;
  const sched_param normal{};
  (void)sched_setscheduler(task, SCHED_OTHER, &normal);
}

}  // namespace threechains::detail
