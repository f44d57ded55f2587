# The installable C++ package (included by the top-level CMakeLists.txt when FP8EMU_INSTALL is ON;
# docs/cpp-package.md is the user's side of this file).
#
# `cmake --install <build> [--prefix P]` puts in P:
#   include/fp8emu/**                         the public headers (fp8emu/cuda/ only in CUDA builds)
#   lib/libfp8emu_emulation.a, libfp8emu.a    the static libraries (+ libfp8emu_cuda.a with CUDA)
#   lib/cmake/fp8emu/                         fp8emuConfig.cmake, fp8emuConfigVersion.cmake
#                                             (SameMinorVersion), fp8emuTargets*.cmake
#   lib/pkgconfig/fp8emu.pc                   relocatable (prefix from ${pcfiledir})
#   bin/fp8emu                                the CLI, when FP8EMU_BUILD_EXPERIMENTS is ON
# ("lib" is CMAKE_INSTALL_LIBDIR.) Exported targets: fp8emu::core (header-only), fp8emu::emulation,
# fp8emu::fp8emu, fp8emu::cuda (CUDA builds). The developer harnesses (fp8emu_internal,
# src/internal), the experiments and the options target are neither installed nor exported.
#
# Install components: fp8emu_Development (headers, libraries, CMake package, pkg-config file) and
# fp8emu_Runtime (the CLI), for `cmake --install <build> --component ...`.

include(CMakePackageConfigHelpers)

set(FP8EMU_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/fp8emu" CACHE STRING
    "Where fp8emuConfig.cmake is installed, relative to the prefix")
mark_as_advanced(FP8EMU_INSTALL_CMAKEDIR)

# Exported names: fp8emu::<EXPORT_NAME>, the same names the build tree's ALIAS targets give.
set_target_properties(fp8emu_core PROPERTIES EXPORT_NAME core)
set_target_properties(fp8emu_emulation PROPERTIES EXPORT_NAME emulation)
set_target_properties(fp8emu PROPERTIES EXPORT_NAME fp8emu)
set(_fp8emu_exported fp8emu_core fp8emu_emulation fp8emu)
if(FP8EMU_ENABLE_CUDA)
  set_target_properties(fp8emu_cuda PROPERTIES EXPORT_NAME cuda)
  list(APPEND _fp8emu_exported fp8emu_cuda)
endif()

install(TARGETS ${_fp8emu_exported} EXPORT fp8emuTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT fp8emu_Development
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT fp8emu_Development)
# (The include directory comes with fp8emu::core's INSTALL_INTERFACE.)

# Headers: the whole public tree. fp8emu/cuda/ declares what libfp8emu_cuda.a defines and includes
# the toolkit's headers, so it is installed only with that library.
if(FP8EMU_ENABLE_CUDA)
  set(_fp8emu_header_excludes)
else()
  set(_fp8emu_header_excludes PATTERN cuda EXCLUDE)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/fp8emu DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT fp8emu_Development FILES_MATCHING PATTERN "*.hpp" ${_fp8emu_header_excludes})

install(EXPORT fp8emuTargets NAMESPACE fp8emu:: DESTINATION ${FP8EMU_INSTALL_CMAKEDIR}
  COMPONENT fp8emu_Development)

set(FP8EMU_PACKAGE_WITH_CUDA ${FP8EMU_ENABLE_CUDA})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/fp8emuConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/fp8emuConfig.cmake
  INSTALL_DESTINATION ${FP8EMU_INSTALL_CMAKEDIR}
  NO_SET_AND_CHECK_MACRO)
# 0.1.x accepts requests for 0.1 (and 0.1.y <= 0.1.x), not 0.2 nor 1.0: before 1.0 a minor
# release may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/fp8emuConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/fp8emuConfig.cmake ${PROJECT_BINARY_DIR}/package/fp8emuConfigVersion.cmake
  DESTINATION ${FP8EMU_INSTALL_CMAKEDIR} COMPONENT fp8emu_Development)

# pkg-config. The libraries are static, so everything they need goes in Libs (a plain
# `pkg-config --libs fp8emu` links); dependencies outside the prefix (zlib, the CUDA toolkit) keep
# their absolute directories, omitted where the compiler searches anyway.
set(_fp8emu_implicit_dirs ${CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES} ${CMAKE_C_IMPLICIT_LINK_DIRECTORIES})
function(_fp8emu_pc_lib out_var lib)
  if(lib MATCHES "^-")
    set(${out_var} "${lib}" PARENT_SCOPE)
    return()
  endif()
  get_filename_component(_dir "${lib}" DIRECTORY)
  get_filename_component(_name "${lib}" NAME)
  if(_name MATCHES "^lib(.+)\\.(so|a|dylib)(\\..*)?$")
    set(_flag "-l${CMAKE_MATCH_1}")
    if(_dir AND NOT _dir IN_LIST _fp8emu_implicit_dirs)
      set(_flag "-L${_dir} ${_flag}")
    endif()
  else()
    set(_flag "${lib}")
  endif()
  set(${out_var} "${_flag}" PARENT_SCOPE)
endfunction()

set(_fp8emu_pc_cflags "-I\${includedir}")
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  string(APPEND _fp8emu_pc_cflags " -ffp-contract=off")  # fp8emu::core's usage requirement
endif()
set(_fp8emu_pc_libs "-L\${libdir} -lfp8emu")
if(FP8EMU_ENABLE_CUDA)
  string(APPEND _fp8emu_pc_cflags " -DFP8EMU_HAVE_CUDA=1")
  string(APPEND _fp8emu_pc_libs " -lfp8emu_cuda")
endif()
string(APPEND _fp8emu_pc_libs " -lfp8emu_emulation")
foreach(_lib IN LISTS ZLIB_LIBRARIES)
  _fp8emu_pc_lib(_flag "${_lib}")
  string(APPEND _fp8emu_pc_libs " ${_flag}")
endforeach()
if(FP8EMU_ENABLE_CUDA)
  # CUDA::cudart_static and CUDA::cublasLt (libcublasLt is shared: its directory also goes in the
  # run path, as CMake's build tree does) with the static runtime's system libraries.
  foreach(_dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
    string(APPEND _fp8emu_pc_cflags " -I${_dir}")
  endforeach()
  string(APPEND _fp8emu_pc_libs " -L${CUDAToolkit_LIBRARY_DIR} -Wl,-rpath,${CUDAToolkit_LIBRARY_DIR}"
         " -lcudart_static -lcublasLt")
  if(UNIX AND NOT APPLE)
    string(APPEND _fp8emu_pc_libs " -lrt")
  endif()
  string(APPEND _fp8emu_pc_libs " -lpthread")
  foreach(_lib IN LISTS CMAKE_DL_LIBS)
    string(APPEND _fp8emu_pc_libs " -l${_lib}")
  endforeach()
endif()
# OpenMP last: its flag (-fopenmp with GCC) both compiles and links the runtime.
string(APPEND _fp8emu_pc_cflags " ${OpenMP_CXX_FLAGS}")
string(APPEND _fp8emu_pc_libs " ${OpenMP_CXX_FLAGS}")

# ${pcfiledir} is <prefix>/<libdir>/pkgconfig: the prefix is found relative to it, so the installed
# tree can be moved.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(_fp8emu_pc_prefix "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _fp8emu_pc_up "/fp8emu-prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/fp8emu-prefix")
  string(REGEX REPLACE "/$" "" _fp8emu_pc_up "${_fp8emu_pc_up}")
  set(_fp8emu_pc_prefix "\${pcfiledir}/${_fp8emu_pc_up}")
endif()
foreach(_kind IN ITEMS LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_kind}}")
    set(_fp8emu_pc_${_kind} "${CMAKE_INSTALL_${_kind}}")
  else()
    set(_fp8emu_pc_${_kind} "\${prefix}/${CMAKE_INSTALL_${_kind}}")
  endif()
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/fp8emu.pc.in ${PROJECT_BINARY_DIR}/package/fp8emu.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/fp8emu.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT fp8emu_Development)

if(FP8EMU_BUILD_EXPERIMENTS)
  # The installed CLI keeps the run path of libraries outside the system directories (libcublasLt
  # of the CUDA toolkit).
  set_target_properties(fp8emu_cli PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
  install(TARGETS fp8emu_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT fp8emu_Runtime)
endif()

if(FP8EMU_BUILD_TESTS)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/package ${PROJECT_BINARY_DIR}/tests/package)
endif()
