// test_not_colo: a loadable shared object that exports nothing colo knows.
extern "C" int colo_test_not_a_plugin() { return 42; }
