// LeakSanitizer's suppressions for the fuzz regression test, built in (LSan
// asks for them through this hook) so that they apply however the test is
// run: the one leak inside Debian's libtorch that fx::load reaches, matched
// by libtorch's function, so that every other leak, libtorch's allocations
// included, is reported. (The load fuzzer's wider list is in
// load_fuzzer_lsan_suppressions.cc; the other fuzzers and every other test
// suppress nothing.)
//
// caffe2::serialize::PyTorchStreamReader::init: the reader's constructor
//   throws from init() when a zip archive opens but lacks its "version"
//   record or its first name has no '/', and the miniz reader state that
//   mz_zip_reader_init allocated is never freed (no destructor runs for a
//   half-built object; its mz_zip_archive member is freed without
//   mz_zip_reader_end). fx::load reaches it on every such file
//   (fuzz/regressions/load/zip_without_version_leaks_in_libtorch and
//   zip_name_without_directory_leaks_in_libtorch). The stack, 152 bytes
//   direct and 3 blocks (66-70 bytes) indirect:
//     #0 malloc
//     #1 libtorch_cpu.so.1.13+0x304d210 (miniz's allocator, unnamed)
//     #2 mz_zip_reader_init
//     #3 caffe2::serialize::PyTorchStreamReader::init()
//     #4 caffe2::serialize::PyTorchStreamReader::PyTorchStreamReader(...)
//     #5 fx::(anonymous namespace)::load_from_bytes fx/io/serialization.cc
//     #6 fx::load(std::istream&, fx::Attributes)
extern "C" const char* __lsan_default_suppressions() {
  return "leak:caffe2::serialize::PyTorchStreamReader::init\n";
}

// libtorch is built without frame pointers, so the fast unwinder's stack of
// an allocation made inside it ends at the first libtorch frame (#1 above,
// which has no name): the full stack, which names the function suppressed
// above, needs the slow unwinder on every allocation. The test runs it (at
// most about twice its time: 13-32 s here, with the machine's load); the
// fuzzers do not (it takes 6x the time per input).
extern "C" const char* __asan_default_options() {
  return "fast_unwind_on_malloc=0";
}
