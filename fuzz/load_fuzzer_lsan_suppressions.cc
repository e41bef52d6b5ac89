// LeakSanitizer's suppressions for the load fuzzer, built in (LSan asks for
// them through this hook) so that they apply however the fuzzer is run.
//
// What this covers: every leaked block that libtorch_cpu.so allocated
// itself, whoever failed to free it: the miniz reader state
// PyTorchStreamReader leaks on a zip without a "version" record
// (lsan_suppressions.cc has its stack), but also IValues libtorch's
// unpickler built or a tensor made inside a libtorch operator that our code
// kept alive by mistake. Blocks allocated in our code (fx's nodes, strings,
// containers) are still reported.
//
// Why not narrower: the fuzzer records each allocation's stack with the
// fast unwinder, and libtorch is built without frame pointers, so the stack
// of an allocation made inside libtorch ends at its first libtorch frame,
// which has no name (miniz's allocator here): the library is the only name
// such a stack can be matched by. The slow unwinder names every frame but
// takes 6x the time per input (174 -> 28 executions/s on the seeds).
// Every finding this fuzzer keeps is run again by //fuzz:regressions_test
// with full stacks, where only PyTorchStreamReader::init is suppressed.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libtorch_cpu.so\n";
}
