// threechains-bench-libm-worst: what one call of libm costs at worst, on the
// inputs that make each function take its slow path. Confined code may call
// these functions as they are (src/confine/runtime.cpp, kPointerFree),
// and the confinement pass charges such a call a fixed amount of fuel
// (confine/fuel.cpp, kImportCallCost units of at most kWorstUnitNs): this
// checks that no call takes longer than that charge. Prints the least time
// per call over many rounds (the call's own cost, without the machine's
// noise), and one JSON line per function to --json.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <vector>

namespace {

// Through memory, so the compiler cannot fold the call away.
double opaque(double x) {
  volatile double y = x;
  return y;
}
float opaque(float x) {
  volatile float y = x;
  return y;
}
volatile double g_sink;

struct Case {
  const char* call;
  double (*run)();
};

constexpr double kTrueMin = 4.9406564584124654e-324;
const Case kCases[] = {
    {"fmod(DBL_MAX, DBL_TRUE_MIN)", [] { return std::fmod(opaque(DBL_MAX), opaque(kTrueMin)); }},
    {"remainder(DBL_MAX, DBL_TRUE_MIN)",
     [] { return std::remainder(opaque(DBL_MAX), opaque(kTrueMin)); }},
    {"fmodf(FLT_MAX, FLT_TRUE_MIN)",
     [] { return double{std::fmod(opaque(FLT_MAX), opaque(1.40129846e-45F))}; }},
    {"pow(1+2^-52, 1e300)", [] { return std::pow(opaque(1.0000000000000002), opaque(1e300)); }},
    {"pow(0.99999999999, 3.3e10)", [] { return std::pow(opaque(0.99999999999), opaque(3.3e10)); }},
    {"tgamma(171.6)", [] { return std::tgamma(opaque(171.6)); }},
    {"tgamma(-170.5)", [] { return std::tgamma(opaque(-170.5)); }},
    {"sin(1e300)", [] { return std::sin(opaque(1e300)); }},
    {"tan(1e22)", [] { return std::tan(opaque(1e22)); }},
    {"exp(709.7)", [] { return std::exp(opaque(709.7)); }},
    {"erfc(26)", [] { return std::erfc(opaque(26.0)); }},
    {"atan2(1e-300, 1e300)", [] { return std::atan2(opaque(1e-300), opaque(1e300)); }},
    {"hypot(DBL_MAX, DBL_MAX)", [] { return std::hypot(opaque(DBL_MAX), opaque(DBL_MAX)); }},
    {"lround(1e300)", [] { return static_cast<double>(std::lround(opaque(1e300))); }},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"threechains-bench-libm-worst: the slowest libm calls confined code can make"};
  int rounds = 2000;
  std::string json;
  app.add_option("-r,--rounds", rounds, "rounds of 10 calls each (the least is reported)");
  app.add_option("--json", json, "append one JSON line per call to this file");
  CLI11_PARSE(app, argc, argv);
  std::ofstream out;
  if (!json.empty()) out.open(json, std::ios::app);
  double slowest = 0;
  for (const Case& c : kCases) {
    double least = 1e18;
    for (int round = 0; round < rounds; ++round) {
      const auto start = std::chrono::steady_clock::now();
      for (int k = 0; k < 10; ++k) g_sink = c.run();
      const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
      least = std::min(least, took.count() / 10);
    }
    slowest = std::max(slowest, least);
    fmt::print("{:<36} {:8.1f} ns/call\n", c.call, least);
    if (out) out << fmt::format("{{\"call\":\"{}\",\"ns\":{:.1f}}}\n", c.call, least);
  }
  fmt::print("slowest: {:.1f} ns (a confined call of libm is charged 32 units of 100 ns)\n", slowest);
  return 0;
}
