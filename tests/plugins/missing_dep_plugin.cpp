// test_missing_dep: links a library that the loader cannot find (built into a directory that
// is on no search path, with no RPATH to it), so dlopen fails on the dependency.
extern "C" int colo_test_hidden_dependency();

extern "C" int colo_test_uses_hidden_dependency() { return colo_test_hidden_dependency(); }
