# tests/serve/batch.cmake — the tests of `nearattn batch`, `nearattn bench
# serve` and `nearattn bench arrivals` (included by tests/serve/CMakeLists.txt; label serve).
# the batch files (serve/batch_io.c): checked input lines, resume set, repaired last line, flock
na_add_test(test_batch_io SOURCES test_batch_io.c LIBS na_serve LABELS serve unit)
# `nearattn batch` (tests/serve/test_batch.sh SCENARIO MODE): SIGINT/SIGTERM halfway then
# resumed = uninterrupted (monolithic and offload with storage-node processes), bad lines
# become error records, a cut last line is repaired, a foreign or busy output is refused
foreach(batch_pair "resume;monolithic" "resume;offload" "bad;monolithic" "bad;offload"
                   "repair;monolithic")
  list(GET batch_pair 0 batch_scen)
  list(GET batch_pair 1 batch_mode)
  na_add_script_test(test_batch_${batch_scen}_${batch_mode}
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_batch.sh ${batch_scen} ${batch_mode}
    LABELS serve TIMEOUT 480)
endforeach()
# `nearattn bench serve --quick` (tests/serve/test_batch_bench.sh MODE): a smoke run
foreach(bench_mode monolithic offload)
  na_add_script_test(test_batch_bench_serve_${bench_mode}
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_batch_bench.sh ${bench_mode}
    LABELS serve bench TIMEOUT 300)
endforeach()
# `nearattn bench serve --peer` against llama.cpp's llama-server on the same
# generated GGUF (tests/serve/test_bench_serve_llama.sh); skipped (77) where
# llama-server is absent (NA_LLAMA_SERVER or PATH): llama.cpp is built outside
na_add_script_test(test_bench_serve_llama
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_bench_serve_llama.sh
  LABELS serve bench TIMEOUT 300)
# `nearattn bench arrivals` (tests/serve/test_bench_arrivals.sh PEER): a tiny
# Arrivals row (issue 21) beside a second `nearattn serve` (PEER serve, in
# CI) and beside llama.cpp's llama-server (PEER llama: NA_LLAMA_SERVER or
# PATH; skipped (77) without it)
foreach(arr_peer serve llama)
  na_add_script_test(test_bench_arrivals_${arr_peer}
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_bench_arrivals.sh ${arr_peer}
    LABELS serve bench TIMEOUT 300)
endforeach()
