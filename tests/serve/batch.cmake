# tests/serve/batch.cmake — the tests of `nearattn batch` and `nearattn bench
# serve` (included by tests/serve/CMakeLists.txt; label serve).
# the batch files (serve/batch_io.c): checked input lines, resume set, repaired last line, flock
na_add_test(test_batch_io SOURCES test_batch_io.c LIBS na_serve LABELS serve unit)
