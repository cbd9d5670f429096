# Helpers shared by every module: one static library per module, GoogleTest tests with labels, fuzz targets.
include_guard(GLOBAL)

# m3_module(NAME SOURCES ... DEPS ...): a static library m3_<NAME> whose headers are included as "NAME/x.h".
function(m3_module name)
  cmake_parse_arguments(M "" "" "SOURCES;DEPS" ${ARGN})
  add_library(m3_${name} STATIC ${M_SOURCES})
  target_include_directories(m3_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(m3_${name} PUBLIC ${M_DEPS})
  target_compile_options(m3_${name} PRIVATE ${M3_WARNINGS})
endfunction()

# m3_test(NAME SOURCES ... DEPS ... LABELS ...): a GoogleTest binary registered with ctest.
# Tests run from the repository root so fixture paths are stable ("tests/fixtures/...").
function(m3_test name)
  cmake_parse_arguments(T "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_options(${name} PRIVATE ${M3_WARNINGS})
  gtest_discover_tests(${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                       PROPERTIES LABELS "${T_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()

# m3_fuzz_target(NAME SOURCE DEPS ... [RUNS N]): a libFuzzer target (LLVMFuzzerTestOneInput); RUNS: the
# libFuzzer smoke's iterations (default 20000).
# With clang and M3_LIBFUZZER=ON it links libFuzzer; otherwise it links a small deterministic driver
# (fuzz/standalone_driver.cc) that replays the seed corpus and random mutations of it. Either way ctest
# runs a short smoke (label fuzz-smoke) over fuzz/corpus/NAME.
function(m3_fuzz_target name source)
  cmake_parse_arguments(F "" "RUNS" "DEPS" ${ARGN})
  if(NOT F_RUNS)
    set(F_RUNS 20000)
  endif()
  add_executable(${name} ${source})
  target_link_libraries(${name} PRIVATE ${F_DEPS})
  if(M3_LIBFUZZER)
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    # libFuzzer adds new inputs to its first corpus directory: give it a scratch one, the seeds second.
    set(scratch ${CMAKE_CURRENT_BINARY_DIR}/${name}_corpus)
    file(MAKE_DIRECTORY ${scratch})
    add_test(NAME ${name}_smoke COMMAND ${name} -runs=${F_RUNS} -max_len=4096 ${scratch} ${PROJECT_SOURCE_DIR}/fuzz/corpus/${name})
  else()
    target_sources(${name} PRIVATE ${PROJECT_SOURCE_DIR}/fuzz/standalone_driver.cc)
    add_test(NAME ${name}_smoke COMMAND ${name} ${PROJECT_SOURCE_DIR}/fuzz/corpus/${name} 3000)
  endif()
  set_tests_properties(${name}_smoke PROPERTIES LABELS "fuzz-smoke" TIMEOUT 300)
endfunction()
