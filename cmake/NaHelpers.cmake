# How much longer than a Release build a test may take: the sanitizer build
# runs the same workloads several times slower (ASan + UBSan, -O0), and a
# busy machine slows it further. Every test's TIMEOUT is multiplied by it,
# and the scripts multiply their own bounds (hang detectors, waits for a
# line) by NA_TEST_TIME_SCALE from the environment (tests/cluster/proc.sh).
if(NA_SANITIZE)
  set(NA_TEST_TIME_SCALE 4 CACHE STRING "test timeouts x this (sanitizer build)")
else()
  set(NA_TEST_TIME_SCALE 1 CACHE STRING "test timeouts x this")
endif()

# Properties every test shares: exit 77 means "skipped" (hardware absent), the
# timeout (120 s unless given, times NA_TEST_TIME_SCALE), labels, the
# environment the tests read, and RUN_SERIAL when asked.
function(na_test_properties name timeout labels env serial)
  if(NOT timeout)
    set(timeout 120)
  endif()
  math(EXPR timeout "${timeout} * ${NA_TEST_TIME_SCALE}")
  set_tests_properties(${name} PROPERTIES
    SKIP_RETURN_CODE 77
    TIMEOUT ${timeout}
    LABELS "${labels}"
    ENVIRONMENT "NA_SHARED_DIR=${NA_SHARED_DIR};NA_BIN=$<TARGET_FILE:nearattn>;NA_SOURCE_DIR=${CMAKE_SOURCE_DIR};NA_TEST_TIME_SCALE=${NA_TEST_TIME_SCALE};${env}")
  if(serial)
    set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()

# na_add_test(NAME SOURCES f.c... [LIBS lib...] [LABELS l...] [ARGS a...]
#             [TIMEOUT s] [ENV K=V...] [SERIAL])
# One executable per test.
function(na_add_test name)
  cmake_parse_arguments(T "SERIAL" "TIMEOUT" "SOURCES;LIBS;LABELS;ARGS;ENV" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} na_testutil)
  if(TARGET na_cuda)           # the CUDA backend module a test may load
    add_dependencies(${name} na_cuda)
  endif()
  add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
  na_test_properties(${name} "${T_TIMEOUT}" "${T_LABELS}" "${T_ENV}" "${T_SERIAL}")
endfunction()

# na_add_script_test(NAME COMMAND cmd... [LABELS l...] [TIMEOUT s] [ENV K=V...] [SERIAL])
# A test that runs a command (a shell script under tests/).
function(na_add_script_test name)
  cmake_parse_arguments(T "SERIAL" "TIMEOUT" "COMMAND;LABELS;ENV" ${ARGN})
  add_test(NAME ${name} COMMAND ${T_COMMAND})
  na_test_properties(${name} "${T_TIMEOUT}" "${T_LABELS}" "${T_ENV}" "${T_SERIAL}")
endfunction()
