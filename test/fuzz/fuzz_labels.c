// Prepared shards and their labels file: fuzz_prepare.c with FUZZ_LABELS, which also
// writes what it read with prepare's write_split and checks it (see there).
#define FUZZ_LABELS 1
#include "fuzz_prepare.c"
