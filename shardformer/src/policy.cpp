// Policy is an interface; this file anchors its vtable in the library.
#include <colo/shardformer/policy.h>
