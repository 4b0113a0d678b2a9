# What `find_package(kiln)` must find again: every package whose targets kiln's exported targets link
# (kilnConfig.cmake.in writes these lines after `include(CMakeFindDependencyMacro)`).
#   kiln_find_package(NAME [args...])        find_package(NAME args...) now, and find_dependency(NAME args...)
#                                            (without REQUIRED) in the installed kilnConfig.cmake
#   kiln_config_dependency(NAME [args...])   only the find_dependency line (for optional packages, once found)
#   kiln_pkg_check_modules(PREFIX MODULE)    pkg_check_modules(PREFIX REQUIRED IMPORTED_TARGET MODULE) now and
#                                            in kilnConfig.cmake, so PkgConfig::PREFIX exists for consumers
# Macros, not functions: find_package's result variables (OpenCV_LIBS, MPI_CXX_FOUND) stay visible.
# The lines are collected in the global property KILN_CONFIG_DEPENDENCIES, so subfolders can add theirs.
include_guard(GLOBAL)

macro(kiln_config_dependency)
  string(JOIN " " _kiln_dep_line ${ARGN})
  set_property(GLOBAL APPEND_STRING PROPERTY KILN_CONFIG_DEPENDENCIES "find_dependency(${_kiln_dep_line})\n")
endmacro()

macro(kiln_find_package)
  find_package(${ARGN})
  set(_kiln_dep_args ${ARGN})
  list(REMOVE_ITEM _kiln_dep_args REQUIRED)
  kiln_config_dependency(${_kiln_dep_args})
endmacro()

macro(kiln_pkg_check_modules prefix module)
  pkg_check_modules(${prefix} REQUIRED IMPORTED_TARGET ${module})
  set_property(GLOBAL APPEND_STRING PROPERTY KILN_CONFIG_DEPENDENCIES "_kiln_pkg_check_modules(${prefix} ${module})\n")
endmacro()

# Installs kiln_<folder>'s headers (every *.h under the folder) to include/kiln/<folder>/ and the
# library into the export set kilnTargets as kiln::<folder>.
function(kiln_install_library name)
  string(REGEX REPLACE "^kiln_" "" _short ${name})
  set_target_properties(${name} PROPERTIES EXPORT_NAME ${_short})
  install(TARGETS ${name} EXPORT kilnTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/${_short}
          FILES_MATCHING PATTERN "*.h")
endfunction()

# The include directories of a kiln library: the source root in the build tree (sources include
# "core/tensor.h"), include/kiln (the same includes) and include (<kiln/core/tensor.h>) once installed.
function(kiln_include_directories name scope)
  target_include_directories(${name} ${scope} $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/kiln>
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endfunction()

# The package: kiln::kiln (everything), the exported targets, kilnConfig.cmake and its version file.
# Call once, after every library target exists.
function(kiln_install_package)
  add_library(kiln_all INTERFACE)
  target_link_libraries(kiln_all INTERFACE kiln_core kiln_layers kiln_optim kiln_data kiln_models kiln_tools)
  set_target_properties(kiln_all PROPERTIES EXPORT_NAME kiln)
  add_library(kiln::kiln ALIAS kiln_all)
  if(KILN_SANITIZE)  # the static libraries call the sanitizer runtimes: their users must link them
    target_link_options(kiln_core INTERFACE $<INSTALL_INTERFACE:-fsanitize=${KILN_SANITIZE}>)
  endif()
  install(TARGETS kiln_all EXPORT kilnTargets)

  set(KILN_WITH_MPI OFF)
  if(MPI_CXX_FOUND)
    set(KILN_WITH_MPI ON)
  endif()
  set(_dir ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
  install(EXPORT kilnTargets NAMESPACE kiln:: FILE kilnTargets.cmake DESTINATION ${_dir})
  get_property(KILN_CONFIG_DEPENDENCIES GLOBAL PROPERTY KILN_CONFIG_DEPENDENCIES)
  include(CMakePackageConfigHelpers)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
                                ${PROJECT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${_dir})
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
                                   COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
          DESTINATION ${_dir})
endfunction()
