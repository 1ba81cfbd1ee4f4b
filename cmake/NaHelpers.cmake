# na_add_test(NAME SOURCES f.c... [LIBS lib...] [LABELS l...] [ARGS a...]
#             [TIMEOUT s] [ENV K=V...] [SERIAL])
# One executable per test; exit 77 means "skipped" (hardware absent).
function(na_add_test name)
  cmake_parse_arguments(T "SERIAL" "TIMEOUT" "SOURCES;LIBS;LABELS;ARGS;ENV" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} na_testutil)
  add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES
    SKIP_RETURN_CODE 77
    TIMEOUT ${T_TIMEOUT}
    LABELS "${T_LABELS}"
    ENVIRONMENT "NA_SHARED_DIR=${NA_SHARED_DIR};NA_BIN=$<TARGET_FILE:nearattn>;NA_SOURCE_DIR=${CMAKE_SOURCE_DIR};${T_ENV}")
  if(T_SERIAL)
    set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()

# na_add_script_test(NAME COMMAND cmd... [LABELS l...] [TIMEOUT s] [SERIAL])
# A test that runs a command (a shell script under tests/); exit 77 = skipped.
function(na_add_script_test name)
  cmake_parse_arguments(T "SERIAL" "TIMEOUT" "COMMAND;LABELS;ENV" ${ARGN})
  add_test(NAME ${name} COMMAND ${T_COMMAND})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES
    SKIP_RETURN_CODE 77
    TIMEOUT ${T_TIMEOUT}
    LABELS "${T_LABELS}"
    ENVIRONMENT "NA_SHARED_DIR=${NA_SHARED_DIR};NA_BIN=$<TARGET_FILE:nearattn>;NA_SOURCE_DIR=${CMAKE_SOURCE_DIR};${T_ENV}")
  if(T_SERIAL)
    set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()
