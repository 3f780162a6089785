/* What the target's side of the doorbell fence costs: membarrier(2)
 * MEMBARRIER_CMD_GLOBAL_EXPEDITED with one registered process spinning on
 * another CPU (a source streaming), and with it asleep. Not built by CMake:
 *   cc -O2 benchmarks/probes/membarrier_cost.c -o /tmp/membarrier_cost && /tmp/membarrier_cost
 */
#include <linux/membarrier.h>
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int membarrier(int command) { return (int)syscall(__NR_membarrier, command, 0, 0); }

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static double cost_us(int spinning) {
  const pid_t child = fork();
  if (child == 0) {
    membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED);
    volatile long spin = 0;
    for (;;) {
      if (spinning) spin = spin + 1;
      else pause();
    }
  }
  sleep(1);
  const double start = now_us();
  for (int i = 0; i < 1000; ++i) membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED);
  const double each = (now_us() - start) / 1000;
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  return each;
}

int main(void) {
  printf("membarrier GLOBAL_EXPEDITED: %.2f us with a registered process spinning, "
         "%.2f us with it asleep\n",
         cost_us(1), cost_us(0));
  return 0;
}
