// LeakSanitizer's suppressions for the fuzzers and the regression test, built
// in (LSan asks for them through this hook) so that they apply however the
// binaries are run. Only leaks inside Debian's libtorch are suppressed, each
// explained; our code's leaks are all reported.
//
// libtorch is built without frame pointers, so LSan's stack of an allocation
// made inside it ends at the first libtorch frame, often an unnamed static
// function: the only name such a stack can be matched by is the library's.
//
// libtorch_cpu.so: caffe2::serialize::PyTorchStreamReader's constructor
//   throws from init() when a zip archive opens but lacks its "version"
//   record (or its first name has no '/'), and the miniz reader state that
//   mz_zip_reader_init allocated is never freed (no destructor runs for a
//   half-built object). fx::load reaches it on every such malformed file
//   (fuzz/regressions/load/zip_without_version_leaks_in_libtorch).
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libtorch_cpu.so\n";
}
