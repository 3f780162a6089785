#include "helper_cpus.hpp"

#include <sched.h>
#include <sys/sysinfo.h>

#include <cstdio>
#include <cstdlib>

namespace threechains::detail {
namespace {

// The CPUs the kernel keeps out of scheduling balance (isolcpus=, "0-3,8"):
// set aside by the machine's owner for something else, never a helper's.
cpu_set_t isolated_cpus() noexcept {
  cpu_set_t isolated;
  CPU_ZERO(&isolated);
  std::FILE* file = std::fopen("/sys/devices/system/cpu/isolated", "re");
  if (file == nullptr) return isolated;
  char text[4096] = {};
  const std::size_t length = std::fread(text, 1, sizeof(text) - 1, file);
  std::fclose(file);
  text[length] = '\0';
  const char* at = text;
  while (*at >= '0' && *at <= '9') {
    char* end = nullptr;
    const long first = std::strtol(at, &end, 10);
    long last = first;
    if (*end == '-') last = std::strtol(end + 1, &end, 10);
    for (long cpu = first; cpu <= last && cpu < CPU_SETSIZE; ++cpu)
      CPU_SET(static_cast<int>(cpu), &isolated);
    at = *end == ',' ? end + 1 : end;
  }
  return isolated;
}

}  // namespace

bool place_beside_calling_thread(pid_t task) noexcept {
  cpu_set_t bound;
  if (sched_getaffinity(0, sizeof(bound), &bound) != 0) return false;
  static const cpu_set_t isolated = isolated_cpus();
  const int cpus = get_nprocs_conf();
  cpu_set_t beside;
  CPU_ZERO(&beside);
  for (int cpu = 0; cpu < cpus && cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &bound) && !CPU_ISSET(cpu, &isolated)) CPU_SET(cpu, &beside);
  }
  // None: the calling thread may run anywhere (or everywhere but isolated
  // CPUs); nothing to move off. Otherwise the kernel keeps the move within
  // the process's cpuset, and refuses it (EINVAL) where that leaves none.
  if (CPU_COUNT(&beside) == 0) return false;
  return sched_setaffinity(task, sizeof(beside), &beside) == 0;
}

}  // namespace threechains::detail
