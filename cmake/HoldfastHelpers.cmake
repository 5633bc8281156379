# holdfast_library(NAME SOURCES ... [DEPS ...]) -> target holdfast_NAME, alias holdfast::NAME
function(holdfast_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(holdfast_${name} STATIC ${A_SOURCES})
  add_library(holdfast::${name} ALIAS holdfast_${name})
  target_include_directories(holdfast_${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(holdfast_${name} PRIVATE ${HOLDFAST_WARNINGS})
  target_link_libraries(holdfast_${name} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
endfunction()

# holdfast_test(NAME SOURCES ... [DEPS ...] [LABELS ...]) -> gtest executable registered with ctest
function(holdfast_test name)
  if(NOT HOLDFAST_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(A "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE ${HOLDFAST_WARNINGS})
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gtest_main Threads::Threads)
  if(NOT A_LABELS)
    set(A_LABELS unit)
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT}
    ENVIRONMENT "HOLDFAST_BUILD_DIR=${PROJECT_BINARY_DIR};HOLDFAST_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()

# holdfast_use_torch(TARGET): compile TARGET's sources against LibTorch.
# - LibTorch's headers are third-party: SYSTEM, so their warnings stay out of ours.
# - Current LibTorch 2.x releases require C++20 (Debian's 1.13 builds either way),
#   so the few LibTorch translation units are C++20; the rest of the tree is C++17.
# - A LibTorch from a PyTorch wheel ships its own fmt headers in its include root,
#   which is searched before /usr/include; spdlog, built against Debian's fmt, does
#   not compile against them. HOLDFAST_FMT_FIRST_DIR (set in the top CMakeLists)
#   puts Debian's fmt ahead for these targets.
function(holdfast_use_torch target)
  target_include_directories(${target} SYSTEM PRIVATE ${TORCH_INCLUDE_DIRS})
  set_target_properties(${target} PROPERTIES CXX_STANDARD 20)
  if(HOLDFAST_FMT_FIRST_DIR)
    target_include_directories(${target} SYSTEM BEFORE PRIVATE ${HOLDFAST_FMT_FIRST_DIR})
  endif()
endfunction()

# holdfast_fuzz_target(NAME CORPUS DIR SOURCES ... [DEPS ...] [DEFINITIONS ...] [FLAGS ...]) -> a libFuzzer
# executable, only with HOLDFAST_FUZZ (clang). SOURCES are the harness and the product sources it
# exercises, compiled into the target with libFuzzer's coverage instrumentation and ASan + UBSan
# (undefined behaviour stops the run like a crash; cmake/fuzz_ignorelist.txt lists the known
# third-party exceptions), so that libFuzzer sees their edges; DEPS are
# linked as built. CORPUS names the seed folder tests/fuzz/corpus/DIR; FLAGS are libFuzzer flags
# the target needs (e.g. -max_len=N for inputs longer than 4096 bytes). `ninja holdfast_fuzz`
# builds every target; BUILD/fuzz_targets.txt lists them for scripts/fuzz.sh.
function(holdfast_fuzz_target name)
  if(NOT HOLDFAST_FUZZ)
    return()
  endif()
  cmake_parse_arguments(A "" "CORPUS" "SOURCES;DEPS;DEFINITIONS;FLAGS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE ${HOLDFAST_WARNINGS} -fsanitize=fuzzer,address,undefined
    -fno-sanitize-recover=all -fsanitize-ignorelist=${PROJECT_SOURCE_DIR}/cmake/fuzz_ignorelist.txt)
  target_compile_definitions(${name} PRIVATE ${A_DEFINITIONS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(${name} PRIVATE ${A_DEPS})
  add_dependencies(holdfast_fuzz ${name})
  list(JOIN A_FLAGS " " flags)
  set_property(GLOBAL APPEND PROPERTY HOLDFAST_FUZZ_TARGETS "${A_CORPUS} ${name} $<TARGET_FILE:${name}> ${flags}")
endfunction()
