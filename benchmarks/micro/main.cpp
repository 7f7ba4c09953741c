// colo_micro_bench: Google Benchmark micro-benchmarks of colo's building blocks (attention,
// optimizers, collectives). Benchmarks are registered at run time, once per available device.
//   colo_micro_bench --benchmark_filter='attention/.*/cuda'
#include "micro_bench.h"

#include <benchmark/benchmark.h>

int main(int argc, char** argv) {
  const auto devices = colo::bench::benchmark_devices();
  colo::bench::register_attention_benchmarks(devices);
  colo::bench::register_optimizer_benchmarks(devices);
  colo::bench::register_collective_benchmarks(devices);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
