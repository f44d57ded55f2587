# package_install (tests/package/CMakeLists.txt): install this build into STAGE with
# `cmake --install` (nothing is rebuilt), move STAGE to PREFIX (so anything that still points into
# STAGE, the source or the build tree shows up in the consumer tests), and check the installed tree.
# Inputs (-D): BUILD_DIR STAGE PREFIX LIBDIR VERSION WITH_CUDA WITH_CLI CONFIG FP8EMU_SOURCE.
cmake_minimum_required(VERSION 3.25)

set(failures "")
# expect("<if() condition>" "message"): the condition is parsed as code, in the caller's scope.
macro(expect cond msg)
  cmake_language(EVAL CODE "if(NOT (${cond}))\n list(APPEND failures [==[${msg}]==])\nendif()")
endmacro()

file(REMOVE_RECURSE "${STAGE}" "${PREFIX}")
set(config_args)
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${STAGE}" ${config_args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc}):\n${out}\n${err}")
endif()
file(RENAME "${STAGE}" "${PREFIX}")
message(STATUS "installed into ${STAGE}, moved to ${PREFIX}")

# Headers: the public tree, fp8emu/cuda/ only with CUDA; never the internal harness headers.
foreach(h format/format_spec.hpp core/cast.hpp core/mma_model.hpp nv.hpp types.hpp eigen.hpp
          emulation/gemm_models.hpp backend/device.hpp scaling/delayed_quantizer.hpp nn/linear.hpp
          io/npy.hpp util/error.hpp config.hpp)
  expect("EXISTS \"${PREFIX}/include/fp8emu/${h}\"" "missing header include/fp8emu/${h}")
endforeach()
if(WITH_CUDA)
  expect("EXISTS \"${PREFIX}/include/fp8emu/cuda/backend.hpp\"" "CUDA build without include/fp8emu/cuda/")
else()
  expect("NOT EXISTS \"${PREFIX}/include/fp8emu/cuda\"" "include/fp8emu/cuda/ installed without CUDA")
endif()
file(GLOB_RECURSE internal_files RELATIVE "${PREFIX}" "${PREFIX}/*internal*" "${PREFIX}/*experiments*"
     "${PREFIX}/*device_check*" "${PREFIX}/*catch*")
expect("NOT internal_files" "internal files installed: ${internal_files}")

# Libraries: exactly the exported static libraries.
set(want_libs libfp8emu.a libfp8emu_emulation.a)
if(WITH_CUDA)
  list(APPEND want_libs libfp8emu_cuda.a)
endif()
list(SORT want_libs)
file(GLOB libs RELATIVE "${PREFIX}/${LIBDIR}" "${PREFIX}/${LIBDIR}/*.a" "${PREFIX}/${LIBDIR}/*.so*")
list(SORT libs)
expect("libs STREQUAL want_libs" "libraries in ${LIBDIR}: '${libs}', expected '${want_libs}'")

# CMake package: the exported targets, and nothing else.
set(cmakedir "${PREFIX}/${LIBDIR}/cmake/fp8emu")
foreach(f fp8emuConfig.cmake fp8emuConfigVersion.cmake fp8emuTargets.cmake)
  expect("EXISTS \"${cmakedir}/${f}\"" "missing ${LIBDIR}/cmake/fp8emu/${f}")
endforeach()
file(READ "${cmakedir}/fp8emuTargets.cmake" targets)
string(REGEX MATCHALL "add_library\\(fp8emu::[A-Za-z0-9_]+" added "${targets}")
string(REPLACE "add_library(" "" added "${added}")
list(SORT added)
set(want_targets fp8emu::core fp8emu::emulation fp8emu::fp8emu)
if(WITH_CUDA)
  list(APPEND want_targets fp8emu::cuda)
endif()
list(SORT want_targets)
expect("added STREQUAL want_targets" "exported targets '${added}', expected '${want_targets}'")
string(REGEX MATCH "fp8emu_options|fp8emu_internal|fp8emu_experiments" build_only "${targets}")
expect("NOT build_only" "fp8emuTargets.cmake names the build-only target ${build_only}")
file(READ "${cmakedir}/fp8emuConfigVersion.cmake" version_file)
string(FIND "${version_file}" "set(PACKAGE_VERSION \"${VERSION}\")" at)
expect("NOT at EQUAL -1" "fp8emuConfigVersion.cmake is not version ${VERSION}")

# pkg-config file: relocatable.
set(pc "${PREFIX}/${LIBDIR}/pkgconfig/fp8emu.pc")
expect("EXISTS \"${pc}\"" "missing ${LIBDIR}/pkgconfig/fp8emu.pc")
if(EXISTS "${pc}")
  file(READ "${pc}" pc_text)
  string(REGEX MATCH "(^|\n)prefix=\\\${pcfiledir}/" pc_relative "${pc_text}")
  expect("pc_relative" "fp8emu.pc: prefix is not relative to pcfiledir")
endif()

# No installed text file may point into the staging prefix, the source tree or the build tree.
file(GLOB_RECURSE text_files "${cmakedir}/*" "${PREFIX}/${LIBDIR}/pkgconfig/*")
foreach(f IN LISTS text_files)
  file(READ "${f}" text)
  foreach(p "${STAGE}" "${FP8EMU_SOURCE}" "${BUILD_DIR}")
    string(FIND "${text}" "${p}" at)
    expect("at EQUAL -1" "${f} contains the path ${p}")
  endforeach()
endforeach()

# The CLI, when the experiments are built: it runs from the moved prefix.
if(WITH_CLI)
  set(cli "${PREFIX}/bin/fp8emu")
  expect("EXISTS \"${cli}\"" "missing bin/fp8emu")
  execute_process(COMMAND "${cli}" table --format e4m3 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  # The E4M3 row of the largest finite code: 0x7E = 0 | 1111 | 110, class max.
  expect("rc EQUAL 0" "installed fp8emu table exited ${rc}: ${err}")
  string(REGEX MATCH "0x7E  0 \\| 1111 \\| 110 +[0-9]+  max" max_row "${out}")
  expect("max_row" "installed fp8emu table: no E4M3 max row in its output")
else()
  expect("NOT EXISTS \"${PREFIX}/bin\"" "bin/ installed without the CLI")
endif()

if(failures)
  list(JOIN failures "\n  " msg)
  message(FATAL_ERROR "installed tree ${PREFIX}:\n  ${msg}")
endif()
message(STATUS "installed tree ok: ${added}; ${libs}")
