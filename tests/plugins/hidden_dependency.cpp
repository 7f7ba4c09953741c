extern "C" int colo_test_hidden_dependency() { return 7; }
